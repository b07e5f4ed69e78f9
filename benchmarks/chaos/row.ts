import { startFaultRelay, type FaultRelay } from '../lib/fault-relay'
import { RedisNode, SentinelTopology } from '../lib/redis-topology'
import { Population } from '../lib/clients/population'
import { sleep, waitFor } from '../lib/processes'
import { readStats } from '../lib/tower/stats'
import { TowerProcess } from '../lib/tower/launcher'
import type { Fault, FaultContext } from './faults'
import { answerTimes, busStates, NO_ANSWER, publishAgainMs, resyncSummary, type ChaosRow } from './judge'
import { postAtRate, postLogOf, type PostRecord } from './poster'

export interface RowPlan {
  cli: string
  clientsPerInstance: number
  /** Posting before the fault, and after it ends (recovery). */
  beforeMs: number
  afterMs: number
  /** After the last notify: time for the last events to arrive. */
  drainMs: number
  notifyTimeoutMs: number
  maxInFlight: number
  statsEveryMs: number
}

const KEY = 'chaos'

/**
 * One fault's row: a fresh Redis (or Sentinel set), two one-process Tower instances on it, clients
 * on each, notifies to instance A at the fault's rate while the fault runs, then the accounting.
 */
export async function runRow (fault: Fault, plan: RowPlan, log: (line: string) => void): Promise<ChaosRow> {
  const redis: FaultContext['redis'] = fault.setup.kind === 'sentinel'
    ? { node: null, sentinel: await SentinelTopology.start() }
    : { node: await RedisNode.start(fault.setup.options), sentinel: null }
  const url = redis.node?.url ?? redis.sentinel?.url as string
  const towers: TowerProcess[] = []
  const populations: Population[] = []
  let relay: FaultRelay | null = null
  try {
    if (fault.relayed) {
      if (redis.node === null) throw new Error(`${fault.name}: the fault relay needs a single Redis node`)
      relay = await startFaultRelay(redis.node.port)
    }
    const towerOptions = { cli: plan.cli, workers: 1, redisUrl: url, flags: ['--redis-key', KEY, '--max-clients', String(plan.clientsPerInstance * 2)] }
    towers.push(await TowerProcess.start({ ...towerOptions, redisUrl: relay?.url ?? url }))
    towers.push(await TowerProcess.start(towerOptions))
    for (const tower of towers) {
      const population = Population.spawn(plan.clientsPerInstance, plan.clientsPerInstance, 0)
      populations.push(population)
      const opened = await population.open(`http://127.0.0.1:${tower.port}/api/events`, 20_000)
      if (opened.client.open !== plan.clientsPerInstance) throw new Error(`only ${opened.client.open} of ${plan.clientsPerInstance} clients opened on port ${tower.port}`)
    }
    await Promise.all(populations.map((p) => p.mark()))
    const ctx: FaultContext = {
      redis,
      towers: [towers[0], towers[1]],
      relay,
      key: KEY,
      log,
      instanceB: {
        stop: () => towers[1].stop(),
        start: async () => {
          towers[1] = await TowerProcess.start(towerOptions, towers[1].port)
          ctx.towers[1] = towers[1]
        }
      }
    }

    const samples: Array<{ at: number, state: string }> = []
    let polling = true
    const poll = (async () => {
      for (let i = 0; polling && i < 10_000; i++) {
        const at = Date.now()
        const state = await readStats(towers[0].port, 1000).then((s) => s.bus.state, () => NO_ANSWER)
        samples.push({ at, state })
        await sleep(plan.statsEveryMs - (Date.now() - at))
      }
    })()

    const records: PostRecord[] = []
    const faultStart = Date.now() + plan.beforeMs
    let faultEnd = 0
    const firstSeq = 1
    const injected = (async () => {
      await sleep(faultStart - Date.now())
      log(`${fault.name}: fault on`)
      try {
        await fault.inject(ctx)
      } finally {
        faultEnd = Date.now()
      }
      log(`${fault.name}: fault over after ${faultEnd - faultStart} ms`)
    })()
    // Posting until the fault is over and afterMs more passed, within a bound of 10 minutes.
    const posted = await postAtRate(towers[0].port, {
      firstSeq,
      perSec: fault.perSec,
      durationMs: 600_000,
      timeoutMs: plan.notifyTimeoutMs,
      maxInFlight: plan.maxInFlight,
      bodyBytes: fault.bodyBytes,
      until: () => faultEnd !== 0 && Date.now() >= faultEnd + plan.afterMs
    }, records)
    const { skipped } = posted
    await injected
    await sleep(plan.drainMs)
    // A stream dropped (or an instance restarted) comes back on the client's backoff (the server's
    // retry: plus jitter): account once every client is back and its resume has landed, so a drop
    // shows as a reconnect and its replay or resync, not as a loss.
    // Bounded: clients still away then are reported (their missing events count as lost).
    let clientsAway = 0
    for (const tower of towers) {
      let current = -1
      await waitFor(`every client back on port ${tower.port}`, async () => {
        current = (await readStats(tower.port, 1000).catch(() => ({ current: -1 }))).current
        return current === plan.clientsPerInstance
      }, 30_000, 250).catch(() => undefined)
      clientsAway += plan.clientsPerInstance - Math.max(0, current)
    }
    if (clientsAway > 0) log(`${fault.name}: ${clientsAway} client(s) still away after 30 s`)
    // One last event after every client is back: a resync received after the last notify would
    // otherwise have no event after it to say how far it covers.
    const last = await postAtRate(towers[0].port, { firstSeq: posted.nextSeq, perSec: 10, durationMs: 100, timeoutMs: plan.notifyTimeoutMs, maxInFlight: 1, bodyBytes: 0 }, records)
    await sleep(plan.drainMs)
    polling = false
    await poll

    const postLog = postLogOf(records)
    const phases = await Promise.all(populations.map((p) => p.phase(postLog, firstSeq, last.nextSeq - 1)))
    const kind = phases.map((phase) => phase.client)
    const sum = (pick: (k: typeof kind[number]) => number): number => kind.reduce((total, k) => total + pick(k), 0)
    const deaf = (instance: number): boolean => fault.deafens === 'both' || (instance === 0 && fault.deafens === 'first')
    const pairs = new Map<number, number>()
    for (const k of kind) {
      for (const group of [k.resyncs.reconnected, k.resyncs.stayed]) for (const [r, n] of group) pairs.set(r, (pairs.get(r) ?? 0) + n)
    }
    return {
      fault: fault.name,
      title: fault.title,
      perSec: fault.perSec,
      clients: plan.clientsPerInstance,
      posted: records.length,
      acknowledged: postLog.accepted.length,
      refused: records.filter((r) => r.outcome === 'refused').length,
      timedOut: records.filter((r) => r.outcome === 'timeout').length,
      skipped,
      lostSilently: sum((k) => k.account.totals.lost),
      coveredByResync: sum((k) => k.account.totals.coveredByResync),
      duplicated: sum((k) => k.account.totals.duplicated),
      outOfOrder: sum((k) => k.account.totals.outOfOrder),
      late: sum((k) => k.account.totals.unexpected),
      resyncs: resyncSummary([...pairs]),
      notifyDuringFault: answerTimes(records, faultStart, faultEnd + plan.afterMs),
      clientsAway,
      // The clients of an instance the fault restarted, or made deaf, reconnect by design: not drops.
      streamsDropped: kind.reduce((total, k, i) => total + ((i === 1 && fault.restartsB) || deaf(i) ? 0 : k.reopens.length), 0),
      deafClosed: kind.reduce((total, k, i) => total + (deaf(i) ? k.reopens.length : 0), 0),
      publishAgainMs: publishAgainMs(records),
      bus: busStates(samples, faultStart, faultEnd),
      faultMs: faultEnd - faultStart,
      losesData: fault.losesData,
      stall: fault.stall,
      failover: fault.failover,
      deafens: fault.deafens !== 'none'
    }
  } finally {
    await Promise.all(populations.map((p) => p.exit()))
    for (const tower of towers) tower.stop()
    await relay?.close()
    if (redis.node !== null) await redis.node.stop()
    else await redis.sentinel.stop()
  }
}
