import t, { type Test } from 'tap'
import type { TestApp } from './fixtures/app'
import { instance, liveInstance, open, reaches, received, relayedPair, server } from './fixtures/bus-instances'
import { isReader } from '../benchmarks/lib/fault-relay'
import { startPausableProxy, type PausableProxy } from './fixtures/pausable-proxy'
import type { RedisServer } from '../benchmarks/lib/redis-server'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

// Continuity across a Redis restart or rollback when an instance is behind or idle, and across
// instances for clients that reconnect to another one (issue 32): "when continuity cannot be
// proven, resync; never guess" — and never move a client back.

/** Where a stream skipped events without a resync between them (none: every gap was said). */
function silentGaps (got: Array<number | 'resync'>): string[] {
  const gaps: string[] = []
  for (let i = 1; i < got.length; i++) {
    const [before, after] = [got[i - 1], got[i]]
    if (before !== 'resync' && after !== 'resync' && after !== before + 1) gaps.push(`${before} → ${after}`)
  }
  return gaps
}

/** Publishes `n` as soon as the bus takes it (right after a restart the bus may still be checking the new server). */
async function publishWhenUp (app: TestApp, n: number): Promise<void> {
  for (let tries = 1; ; tries++) {
    const done = await app.app.sse.broadcast({ n }).then(() => true, () => false)
    if (done) return
    if (tries === 100) throw new Error(`broadcast ${n} refused 100 times`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

async function publishRange (app: TestApp, from: number, to: number): Promise<void> {
  for (let n = from; n <= to; n++) await publishWhenUp(app, n)
}

/** The newest event gone, as after a failover to a replica that never had it: stream and last id (and the counter, if told) as before it. */
async function rollBackTail (redis: RedisServer, key: string, counterToo: boolean): Promise<void> {
  const stream = `{${key}}:stream`
  const [[last], [previous]] = await redis.command('XREVRANGE', stream, '+', '-', 'COUNT', 2) as Array<[string, string[]]>
  await redis.command('XDEL', stream, last)
  await redis.command('XSETID', stream, previous)
  if (counterToo) await redis.command('HINCRBY', `{${key}}:meta`, 's', -1)
}

/** A on a persistent Redis, B reaching it through a proxy the test can pause, a stream open on B. */
async function behindAProxy (t: Test, key: string): Promise<{ redis: RedisServer, a: TestApp, proxy: PausableProxy, b: TestApp, onB: SseConnection }> {
  const redis = await server(t, { persistent: true })
  const a = await instance(t, redis.url, key)
  const proxy = await startPausableProxy(redis.port)
  t.teardown(() => proxy.close())
  const b = await instance(t, proxy.url, key)
  const onB = await open(t, b)
  await waitFor('the stream on B', () => b.app.sse.size === 1)
  return { redis, a, proxy, b, onB }
}

t.test('an instance behind when Redis restarts from a snapshot: its streams get what the snapshot kept, then read on; never a silent skip', async (t) => {
  const { redis, a, proxy, onB } = await behindAProxy(t, 'behind')
  await publishRange(a, 0, 2)
  await waitFor('0-2 on B', () => onB.events.length === 3)
  // B's reader is cut off: 3-5 land in Redis (and in the snapshot) but B never delivers them.
  proxy.pause()
  await publishRange(a, 3, 5)
  await redis.command('SAVE')
  await redis.kill()
  proxy.resume()
  await redis.start()
  await publishWhenUp(a, 6)
  await waitFor('6 on B', () => received(onB).at(-1) === 6, 10_000)
  const got = received(onB)
  t.same(silentGaps(got), [], `B's stream: ${got.join(' ')}`)
  // The new epoch's marker names 5 as the last event; B had delivered 2: it delivers 3-5 of the
  // epoch it leaves (the snapshot kept them) before following the marker, which then proves no loss.
  t.same(got, [0, 1, 2, 3, 4, 5, 6])
})

t.test('two epochs started while an instance was cut off: it delivers both, each marker proving the one before, no resync', async (t) => {
  const { redis, a, proxy, b, onB } = await behindAProxy(t, 'two-epochs')
  await publishRange(a, 0, 1)
  await waitFor('0-1 on B', () => onB.events.length === 2)
  // While B is cut off, two restarts from a snapshot: each new server starts an epoch whose marker
  // names the last event of the one before (as publishers vouching in turn during a slot migration).
  proxy.pause()
  await publishRange(a, 2, 3)
  for (const [from, to] of [[4, 5], [6, 7]]) {
    await redis.command('SAVE')
    await redis.kill()
    await redis.start()
    await publishRange(a, from, to)
  }
  proxy.resume()
  await waitFor('7 on B', () => received(onB).at(-1) === 7, 10_000)
  // B's check finds the third epoch: it reads the rest of the first and the whole second before
  // its marker, so the marker names exactly what B delivered.
  t.same(received(onB), [0, 1, 2, 3, 4, 5, 6, 7])
  t.equal(b.app.sse.stats().bus.discontinuities, 0, 'no discontinuity counted on B')
})

t.test('ids going back on an idle instance: its streams resync within about a second, without waiting for a publish', async (t) => {
  const { redis, key, a, live } = await liveInstance(t)
  await publishRange(a, 0, 2)
  await waitFor('0-2 live', () => live.events.length === 3)
  await rollBackTail(redis, key, true)
  await waitFor('the rollback to be seen with nothing published', () => received(live).includes('resync'), 8000)
  t.same(received(live), [0, 1, 2, 'resync'])
  t.equal(a.app.sse.stats().bus.discontinuities, 1)
})

t.test('ids going back on an idle instance, the counter intact: the stream\'s tail below its cursor is seen too', async (t) => {
  const { redis, key, a, live } = await liveInstance(t)
  await publishRange(a, 0, 2)
  await waitFor('0-2 live', () => live.events.length === 3)
  await rollBackTail(redis, key, false)
  await waitFor('the rollback to be seen', () => received(live).includes('resync'), 8000)
  t.equal(a.app.sse.stats().bus.discontinuities, 1)
})

/** A client that reconnects to whichever instance it is told, with the newest id it has. */
class Hopper {
  readonly connections: SseConnection[] = []
  constructor (readonly name: string) {}

  /** Every event it got, over all its connections, in order. */
  get got (): Array<number | 'resync'> {
    return this.connections.flatMap(received)
  }

  get last (): number | 'resync' | undefined {
    return this.got.at(-1)
  }

  async hop (to: TestApp): Promise<void> {
    const id = this.connections.flatMap((c) => c.events).filter((e) => e.id !== undefined && e.id !== '').at(-1)?.id
    this.connections.at(-1)?.destroy()
    this.connections.push(await connect(to.port, '/api/events', id === undefined ? {} : { 'last-event-id': id }))
  }

  close (): void {
    for (const c of this.connections) c.destroy()
  }
}

async function sizes (a: TestApp, b: TestApp, onA: number, onB: number): Promise<void> {
  await waitFor(`${onA} streams on A, ${onB} on B`, () => a.app.sse.size === onA && b.app.sse.size === onB)
}

t.test('Redis replaced while one instance lags: clients hopping between instances never move back, one resync each, nothing twice', async (t) => {
  const redis: RedisServer = await server(t)
  const key = 'hop'
  const a = await instance(t, redis.url, key)
  // The lagging instance: its Redis connections pass a relay the test holds.
  const relay = await startPausableProxy(redis.port)
  t.teardown(() => relay.close())
  const b = await instance(t, relay.url, key)
  const hoppers = Array.from({ length: 6 }, (_, i) => new Hopper(`c${i}`))
  t.teardown(() => { for (const h of hoppers) h.close() })
  const [startedOnA, startedOnB] = [hoppers.slice(0, 3), hoppers.slice(3)]
  for (const h of startedOnA) await h.hop(a)
  for (const h of startedOnB) await h.hop(b)
  await sizes(a, b, 3, 3)
  await publishRange(a, 0, 4)
  await waitFor('0-4 everywhere', () => hoppers.every((h) => h.last === 4))

  relay.pause()
  await publishRange(a, 5, 9)
  await waitFor('5-9 on A', () => startedOnA.every((h) => h.last === 9))
  // Replaced: an empty Redis on the same address. A moves to a new epoch; B, held, does not.
  await redis.kill()
  await redis.start()
  await publishRange(a, 10, 14)
  await waitFor('10-14 on A', () => startedOnA.every((h) => h.last === 14))

  // Everyone hops: A's clients (new epoch) to the lagging B, B's clients (old epoch) to A.
  for (const h of hoppers) await h.hop(startedOnA.includes(h) ? b : a)
  await sizes(a, b, 3, 3)
  await publishRange(a, 15, 19)
  await waitFor('15-19 on A', () => startedOnB.every((h) => h.last === 19))
  t.same(startedOnA.map((h) => received(h.connections[1])), [[], [], []], 'the lagging B sends nothing older than what they have, no resync')

  relay.resume()
  await waitFor('B caught up: 15-19 on B', () => startedOnA.every((h) => h.last === 19), 15_000)
  for (const h of hoppers) await h.hop(startedOnA.includes(h) ? a : b)
  await sizes(a, b, 3, 3)
  await publishRange(a, 20, 24)
  await waitFor('20-24 everywhere', () => hoppers.every((h) => h.last === 24), 10_000)

  for (const h of hoppers) {
    const got = h.got
    const numbers = got.filter((e): e is number => e !== 'resync')
    t.same(silentGaps(got), [], `${h.name}: no silent gap in ${got.join(' ')}`)
    t.equal(new Set(numbers).size, numbers.length, `${h.name}: no event twice`)
    t.equal(got.filter((e) => e === 'resync').length, 1, `${h.name}: one resync in all (the replaced Redis)`)
    t.ok(h.connections.every((c) => received(c).filter((e) => e === 'resync').length <= 1), `${h.name}: at most one resync per connection`)
  }
})

t.test('a client with an id of the epoch a lagging instance has not reached yet waits for it there: never a resync to an older id', async (t) => {
  const { redis, relay, a, b, onA } = await relayedPair(t)
  const onB = await open(t, b)
  await waitFor('the stream on B', () => b.app.sse.size === 1)
  // A's reader hears nothing more for a while (until its command deadline drops it); its publisher still answers.
  relay.halfOpen(isReader)
  // The bus's state gone: B's next publish starts a new epoch, which A's reader has not seen.
  await redis.command('DEL', '{relayed}:meta')
  await b.app.sse.broadcast({ n: 1 })
  await waitFor('1 on B', () => received(onB).at(-1) === 1)
  const hopped = await connect(a.port, '/api/events', { 'last-event-id': onB.events.at(-1)?.id as string })
  t.equal(hopped.status, 200)
  await reaches(t, 'A to follow the new epoch', () => received(onA).includes('resync'))
  await b.app.sse.broadcast({ n: 2 })
  await reaches(t, '2 on the stream that came to A', () => received(hopped).includes(2))
  t.same(received(hopped), [2], 'held until A caught up, then read on: no resync to the older id A had')
  hopped.destroy()
})
