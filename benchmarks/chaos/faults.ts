import type { FaultRelay } from '../lib/fault-relay'
import { RedisNode, SentinelTopology, type NodeOptions } from '../lib/redis-topology'
import { sleep } from '../lib/processes'
import { DEAF_CLOSE_MS, RECEIVE_DEADLINE_MS } from '../../lib/bus/redis/watchdog'
import type { TowerProcess } from '../lib/tower/launcher'

/** What a fault acts on: the Redis it runs on (one server or a Sentinel set) and the two Tower instances. */
export interface FaultContext {
  redis: { node: RedisNode, sentinel: null } | { node: null, sentinel: SentinelTopology }
  towers: [TowerProcess, TowerProcess]
  /** The fault relay instance A reaches Redis through (a relayed fault's row), else null. */
  relay: FaultRelay | null
  /** The bus's Redis key prefix (Tower's --redis-key). */
  key: string
  log: (line: string) => void
  /**
   * Stops the second instance / starts a fresh one on its port: its clients, away while the data
   * is lost, come back with a Last-Event-ID from before the loss — the resume that must not skip it.
   */
  instanceB: { stop: () => void, start: () => Promise<void> }
}

export interface Fault {
  name: string
  title: string
  perSec: number
  /** Size of each notify's body (the event is a little larger). */
  bodyBytes: number
  setup: { kind: 'node', options: NodeOptions } | { kind: 'sentinel' }
  losesData: boolean
  stall: boolean
  failover: boolean
  /** The fault stops the second instance and starts it again (its clients' reconnects are not drops). */
  restartsB: boolean
  /** Instance A reaches Redis through the fault relay (B straight). */
  relayed: boolean
  /**
   * Which instances the fault makes deaf for longer than their streams are kept (the receive
   * deadline plus busDeafCloseMs): the first (A) or both (a stall of Redis itself). A deaf
   * instance must say so, tell its streams and close them with a retry (not drops of healthy
   * streams; one resync per client), refuse new streams meanwhile, and be up again after the heal.
   */
  deafens: 'none' | 'first' | 'both'
  /** A setup the bus must refuse at start (Tower exits naming it): the row is that refusal, nothing is published. */
  refusedAtStart?: RegExp
  /** Runs the fault and starts its recovery; resolves when the fault is over (recovery may still be under way). */
  inject: (ctx: FaultContext) => Promise<void>
}

export interface FaultTimes {
  /** Redis SIGSTOPped this long. */
  stallMs: number
  /** A Tower instance SIGSTOPped this long. */
  instanceStopMs: number
  /** Writes between a snapshot (or a paused replica) and the kill. */
  writeWindowMs: number
  /** Bound on a Sentinel failover. */
  failoverTimeoutMs: number
  /** Instance A's latency to Redis lasts this long. */
  latencyMs: number
  /** Instance A half-open this long. */
  partitionMs: number
}

const node = (ctx: FaultContext): RedisNode => {
  if (ctx.redis.node === null) throw new Error('this fault needs a single Redis node')
  return ctx.redis.node
}
const relay = (ctx: FaultContext): FaultRelay => {
  if (ctx.relay === null) throw new Error('this fault needs instance A behind the fault relay')
  return ctx.relay
}
const sentinel = (ctx: FaultContext): SentinelTopology => {
  if (ctx.redis.sentinel === null) throw new Error('this fault needs a Sentinel topology')
  return ctx.redis.sentinel
}

/** The pid of a one-process Tower (its primary is the instance). */
function towerPid (tower: TowerProcess): number {
  const [pid] = tower.workerPids
  if (pid === undefined) throw new Error('Tower has no live process')
  return pid
}

/** SIGSTOP a process for `ms`, SIGCONT it even if the wait is cut short. */
async function stopFor (pid: number, ms: number): Promise<void> {
  process.kill(pid, 'SIGSTOP')
  try {
    await sleep(ms)
  } finally {
    process.kill(pid, 'SIGCONT')
  }
}

async function killPrimaryAndFailOver (topology: SentinelTopology, times: FaultTimes, log: (line: string) => void): Promise<void> {
  const old = await topology.primaryPort()
  await topology.node(old).kill()
  const next = await topology.failedOverFrom(old, times.failoverTimeoutMs)
  log(`primary ${old} killed; sentinels promoted ${next}`)
}

/** The replica stops applying writes for `ms` (CLIENT PAUSE … WRITE), so what the primary takes next is not on it. */
async function pauseReplica (topology: SentinelTopology, ms: number): Promise<void> {
  const primary = await topology.primaryPort()
  const replica = topology.nodes.find((n) => n.port !== primary)
  if (replica === undefined) throw new Error('no replica')
  await replica.command('CLIENT', 'PAUSE', ms, 'WRITE')
}

/**
 * Instance B is stopped while A publishes for `writeWindowMs` after `before`, Redis is killed and
 * restarted from what it persisted, then B starts: a fresh instance resuming across the loss.
 */
async function restartWhileBDown (ctx: FaultContext, times: FaultTimes, before: () => Promise<unknown> = async () => {}): Promise<void> {
  await before()
  ctx.instanceB.stop()
  await sleep(times.writeWindowMs)
  await node(ctx).kill()
  await node(ctx).restart()
  await ctx.instanceB.start()
}

/** Delays what instance A sends to Redis and what comes back for `ms`, then forwards at once again. */
async function delayFor (ctx: FaultContext, toRedisMs: number, fromRedisMs: number, ms: number): Promise<void> {
  relay(ctx).delay(toRedisMs, fromRedisMs)
  try {
    await sleep(ms)
  } finally {
    relay(ctx).delay(0, 0)
  }
}

/** Redis closes its side of instance A's connections (the relay's upstreams), as `CLIENT KILL` does to a client it gave up on. */
async function killOnRedis (ctx: FaultContext): Promise<void> {
  const addresses = [...relay(ctx).connections].map((c) => c.redisSide).filter((a) => a !== '')
  // A connection that closed since it was listed is no client to kill.
  for (const address of addresses) await node(ctx).command('CLIENT', 'KILL', 'ADDR', address).catch(() => undefined)
  ctx.log(`CLIENT KILL on ${addresses.length} connection(s) of instance A`)
}

/** The faults, one row each, in the order of the table. */
export function faults (t: FaultTimes): Fault[] {
  const single = (options: NodeOptions = {}): Fault['setup'] => ({ kind: 'node', options })
  const plain = { bodyBytes: 0, losesData: false, stall: false, failover: false, restartsB: false, relayed: false, deafens: 'none' as const }
  // Redis stopped past the deaf spell leaves both instances deaf.
  const stalled = t.stallMs > RECEIVE_DEADLINE_MS + DEAF_CLOSE_MS ? 'both' : 'none'
  const relayed = { ...plain, perSec: 20, setup: single(), relayed: true }
  return [
    { ...plain, name: 'stall-20', title: `Redis SIGSTOP ${t.stallMs / 1000} s at 20/s`, perSec: 20, setup: single(), stall: true, deafens: stalled, inject: async (ctx) => { await stopFor(node(ctx).pid, t.stallMs) } },
    { ...plain, name: 'stall-200', title: `Redis SIGSTOP ${t.stallMs / 1000} s at 200/s`, perSec: 200, setup: single(), stall: true, deafens: stalled, inject: async (ctx) => { await stopFor(node(ctx).pid, t.stallMs) } },
    {
      ...plain,
      name: 'failover',
      title: 'Sentinel failover of a dead primary',
      perSec: 20,
      setup: { kind: 'sentinel' },
      failover: true,
      inject: async (ctx) => { await killPrimaryAndFailOver(sentinel(ctx), t, ctx.log) }
    },
    {
      ...plain,
      name: 'lagging-replica',
      title: 'failover to a lagging replica',
      perSec: 20,
      setup: { kind: 'sentinel' },
      losesData: true,
      failover: true,
      restartsB: true,
      inject: async (ctx) => {
        ctx.instanceB.stop()
        await pauseReplica(sentinel(ctx), t.writeWindowMs + 500)
        await sleep(t.writeWindowMs)
        await killPrimaryAndFailOver(sentinel(ctx), t, ctx.log)
        await ctx.instanceB.start()
      }
    },
    {
      ...plain,
      name: 'rdb-restart',
      title: 'restart from an RDB snapshot',
      perSec: 20,
      setup: single({ persistence: 'rdb' }),
      losesData: true,
      restartsB: true,
      inject: async (ctx) => { await restartWhileBDown(ctx, t, () => node(ctx).command('SAVE')) }
    },
    {
      ...plain,
      name: 'aof-restart',
      title: 'restart with AOF (everysec)',
      perSec: 20,
      setup: single({ persistence: 'aof' }),
      // appendfsync everysec may lose up to a second of acknowledged writes.
      losesData: true,
      restartsB: true,
      inject: async (ctx) => { await restartWhileBDown(ctx, t) }
    },
    {
      ...plain,
      name: 'allkeys-lru',
      title: 'allkeys-lru under memory pressure',
      perSec: 20,
      setup: single({ memory: { maxmemory: '3mb', policy: 'allkeys-lru' } }),
      losesData: true,
      refusedAtStart: /maxmemory-policy is allkeys-lru/,
      inject: async (ctx) => {
        // Filler: 8 KB values, 50 every 100 ms, bounded by the stall time: Redis must evict.
        const filler = 'f'.repeat(8192)
        const until = Date.now() + t.stallMs
        for (let round = 0; Date.now() < until && round < 1000; round++) {
          const args: string[] = []
          for (let i = 0; i < 50; i++) args.push(`filler:${round}:${i}`, filler)
          await node(ctx).command('MSET', ...args).catch(() => undefined)
          await sleep(100)
        }
      }
    },
    {
      ...plain,
      name: 'instance-stop-trim',
      title: `a Tower instance SIGSTOPped ${t.instanceStopMs / 1000} s while the stream trims past it`,
      // Over the stream's 1,000-entry floor within the stop.
      perSec: Math.ceil(1500 / (t.instanceStopMs / 1000)),
      setup: single(),
      losesData: true,
      inject: async (ctx) => { await stopFor(towerPid(ctx.towers[1]), t.instanceStopMs) }
    },
    {
      ...plain,
      name: 'backlog-4kb',
      title: `a backlog of 4 KB events (instance SIGSTOPped ${t.instanceStopMs / 1000} s)`,
      perSec: Math.ceil(600 / (t.instanceStopMs / 1000)),
      bodyBytes: 3900,
      setup: single(),
      // Catching up may resync the streams that cannot hold it.
      losesData: true,
      inject: async (ctx) => { await stopFor(towerPid(ctx.towers[1]), t.instanceStopMs) }
    },
    {
      ...plain,
      name: 'clock-ahead',
      title: 'a clock-ahead entry lost in failover',
      perSec: 20,
      setup: { kind: 'sentinel' },
      losesData: true,
      failover: true,
      restartsB: true,
      inject: async (ctx) => {
        const topology = sentinel(ctx)
        ctx.instanceB.stop()
        await pauseReplica(topology, t.writeWindowMs + 500)
        // An entry stamped a minute ahead (a primary whose clock ran fast), shaped like the last one.
        const primary = topology.node(await topology.primaryPort())
        const stream = `{${ctx.key}}:stream`
        const [last] = await primary.command('XREVRANGE', stream, '+', '-', 'COUNT', 1) as Array<[string, string[]]>
        if (last === undefined) throw new Error('clock-ahead: the stream is empty')
        const fields = last[1].slice()
        const d = fields.indexOf('d')
        if (d !== -1) fields[d + 1] = JSON.stringify({ type: 'bench', title: 'ahead', body: '' })
        const o = fields.indexOf('o')
        if (o !== -1) fields[o + 1] = 'chaos:ahead'
        // As the bus's script would write it on that primary: the epoch's next sequence number,
        // counted in its meta hash too (a copy of the last one's would be a rollback of its own).
        const n = fields.indexOf('n')
        if (n !== -1) fields[n + 1] = String(await primary.command('HINCRBY', `{${ctx.key}}:meta`, 's', 1))
        await primary.command('XADD', stream, `${Date.now() + 60_000}-0`, ...fields)
        await sleep(t.writeWindowMs)
        await killPrimaryAndFailOver(topology, t, ctx.log)
        await ctx.instanceB.start()
      }
    },
    { ...relayed, name: 'latency-200', title: `instance A: 200 ms each way to Redis for ${t.latencyMs / 1000} s`, inject: async (ctx) => { await delayFor(ctx, 200, 200, t.latencyMs) } },
    { ...relayed, name: 'latency-to-redis', title: `instance A: 1.5 s toward Redis, 0 back, for ${t.latencyMs / 1000} s`, inject: async (ctx) => { await delayFor(ctx, 1500, 0, t.latencyMs) } },
    { ...relayed, name: 'latency-from-redis', title: `instance A: 0 toward Redis, 1.5 s back, for ${t.latencyMs / 1000} s`, inject: async (ctx) => { await delayFor(ctx, 0, 1500, t.latencyMs) } },
    {
      ...relayed,
      name: 'half-open',
      title: `instance A half-open ${t.partitionMs / 1000} s (sockets wedged, Redis drops its side)`,
      deafens: 'first',
      inject: async (ctx) => {
        relay(ctx).halfOpen()
        try {
          await killOnRedis(ctx)
          await sleep(t.partitionMs)
        } finally {
          relay(ctx).heal()
        }
      }
    },
    { ...relayed, name: 'redis-kill', title: 'Redis drops instance A\'s connections (CLIENT KILL)', inject: killOnRedis },
    { ...relayed, name: 'reset', title: 'instance A\'s connections to Redis reset (the relay destroys them)', inject: async (ctx) => { relay(ctx).drop() } }
  ]
}
