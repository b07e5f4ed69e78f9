import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { RedisBus, type RedisBusOptions } from '../lib/bus/redis/redis-bus'
import type { BusEvent } from '../lib/bus/bus'
import { DEFAULTS } from '../lib/options'
import type { TowerSseOptions } from '../lib'
import { broadcastIdempotency, busContract } from './fixtures/bus-contract'
import { queryTopicsOrAll, startApp, type TestApp } from './fixtures/app'
import { received } from './fixtures/bus-instances'
import { startRedis, type RedisServer } from '../benchmarks/lib/redis-server'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

const quiet = { warn: () => {}, info: () => {} }
let redis: RedisServer
let keys = 0

t.before(async () => { redis = await startRedis() })
t.teardown(() => redis.stop())

/** Each test its own stream on the one server: `{<key>}:stream`, `{<key>}:meta`. */
function freshKey (): string {
  return `t${++keys}`
}

async function instance (t: Test, redisKey: string, options: TowerSseOptions = {}): Promise<TestApp> {
  const started = await startApp({ heartbeatMs: 60_000, topicsFromRequest: queryTopicsOrAll, ...options, redis: { url: redis.url, key: redisKey } })
  t.teardown(() => started.app.close())
  return started
}

function numbers (c: SseConnection): number[] {
  return c.events.filter((e) => e.event !== 'resync').map((e) => JSON.parse(e.data).n)
}

/** A bus of its own on the test's server, with the plugin's defaults unless told. */
function bus (key = freshKey(), options: Partial<RedisBusOptions> = {}): RedisBus {
  const { publishTimeoutMs, maxPendingPublishes } = DEFAULTS.redis
  const { idempotencyWindowMs } = DEFAULTS.history
  return new RedisBus({ connection: redis.url, key, historyEvents: 100, publishTimeoutMs, maxPendingPublishes, idempotencyWindowMs, random: Math.random, log: quiet, ...options })
}

busContract(t, async () => bus())
broadcastIdempotency(t, () => startApp({ redis: { url: redis.url, key: freshKey() } }), async () => await redis.command('KEYS', '*') as string[])

t.test('two instances on one Redis: a broadcast on A reaches the streams of B; a client resumes on B from an id A gave', async (t) => {
  const key = freshKey()
  const a = await instance(t, key)
  const b = await instance(t, key)
  const onA = await connect(a.port)
  const onB = await connect(b.port, '/api/events?topics=ws-1')
  await waitFor('both open', () => a.app.sse.size === 1 && b.app.sse.size === 1)
  const first = await a.app.sse.broadcast({ n: 0 }, { idProperty: 'id' })
  t.match(first.id, /^[0-9a-z]{1,12}-\d{13}-\d+$/, 'epoch + Redis stream id')
  t.equal(first.delivered, 1, 'delivered counts the streams of the publishing instance')
  await b.app.sse.broadcast({ n: 1 }, { topic: 'ws-1' })
  await a.app.sse.broadcast({ n: 2 }, { topic: 'ws-2' })
  await waitFor('deliveries', () => onA.events.length === 3 && onB.events.length === 2)
  t.same(numbers(onA), [0, 1, 2])
  t.same(numbers(onB), [0, 1], 'topics are filtered on the receiving instance')
  t.same(JSON.parse(onB.events[0].data), { id: first.id, n: 0 }, 'the data carries the same id on every instance')
  t.equal(onB.events[0].id, first.id)
  t.equal(a.app.sse.lastEventId, b.app.sse.lastEventId, 'both instances saw the same newest event')

  const resumed = await connect(b.port, '/api/events', { 'last-event-id': onA.events[0].id as string })
  await waitFor('replay on B', () => resumed.events.length === 2)
  t.same(numbers(resumed), [1, 2], 'from B\'s own ring')
  t.equal(b.app.sse.stats().bus.reads, 0, 'the ring covered it: no Redis read')
  t.equal(b.app.sse.stats().bus.kind, 'redis')
  t.equal(b.app.sse.stats().bus.state, 'up')
  for (const c of [onA, onB, resumed]) c.destroy()
})

t.test('a new instance resumes from Redis; concurrent resumes of one range share one read (its id probed, then its range); live events never overtake', async (t) => {
  const key = freshKey()
  const a = await instance(t, key)
  for (let n = 0; n < 10; n++) await a.app.sse.broadcast({ n })
  const from = (await a.app.sse.broadcast({ n: 10 })).id
  for (let n = 11; n < 20; n++) await a.app.sse.broadcast({ n })
  const late = await instance(t, key)
  t.equal(late.app.sse.lastEventId, a.app.sse.lastEventId, 'a new instance starts at the newest event')

  const before = await redis.calls('xrange')
  const resumers = await Promise.all(Array.from({ length: 20 }, () => connect(late.port, '/api/events', { 'last-event-id': from })))
  await waitFor('every replay', () => resumers.every((c) => c.events.length === 9))
  t.equal(await redis.calls('xrange') - before, 2, '20 resumes of the same range: one read, two XRANGEs (the id, then the range)')
  t.equal(late.app.sse.stats().bus.reads, 1)
  for (const c of resumers) t.same(numbers(c), [11, 12, 13, 14, 15, 16, 17, 18, 19])

  // Resumes racing a burst of live events: each stream must read 0..49 after its id exactly once, in order.
  const racers: SseConnection[] = []
  const burst = (async () => { for (let n = 20; n < 70; n++) await a.app.sse.broadcast({ n }) })()
  for (let i = 0; i < 10; i++) racers.push(await connect(late.port, '/api/events', { 'last-event-id': from }))
  await burst
  await waitFor('every racer to reach 69', () => racers.every((c) => numbers(c).at(-1) === 69))
  for (const c of racers) t.same(numbers(c), Array.from({ length: 59 }, (_, i) => i + 11), 'no gap, no duplicate, in order')
  for (const c of [...resumers, ...racers]) c.destroy()
})

t.test('FLUSHALL: the epoch changes and a stale id gets exactly one resync', async (t) => {
  const key = freshKey()
  const a = await instance(t, key)
  const live = await connect(a.port)
  await waitFor('open', () => a.app.sse.size === 1)
  const old = (await a.app.sse.broadcast({ n: 0 })).id
  await redis.command('FLUSHALL')
  const fresh = await a.app.sse.broadcast({ n: 1 })
  t.not(fresh.id.split('-')[0], old.split('-')[0], 'a new epoch')
  await waitFor('live stream got both', () => numbers(live).length === 2)
  t.same(received(live), [0, 'resync', 1], 'a connected stream is told once (what it missed before the flush is unknowable), then goes on')

  const stale = await connect(a.port, '/api/events', { 'last-event-id': old })
  const resync = await stale.nextEvent(0)
  t.equal(resync.event, 'resync')
  t.equal(resync.id, fresh.id, 'and moves the client to the newest id')
  stale.destroy()
  const again = await connect(a.port, '/api/events', { 'last-event-id': resync.id as string })
  await a.app.sse.broadcast({ n: 2 })
  await waitFor('the next event', () => again.events.length === 1)
  t.same(numbers(again), [2], 'the second reconnect resumes: one resync in all')
  for (const c of [live, again]) c.destroy()
})

t.test('the reader\'s connection dropped while another instance publishes: nothing is lost', async (t) => {
  const key = freshKey()
  const a = await instance(t, key)
  const b = await instance(t, key)
  const onB = await connect(b.port)
  await waitFor('open', () => b.app.sse.size === 1)
  await a.app.sse.broadcast({ n: 0 })
  await waitFor('first', () => onB.events.length === 1)
  // Kill every blocked XREAD (both readers); A's publisher stays connected and goes on publishing.
  // A reader that has just delivered is between two XREADs for a moment: ask until both block (bounded).
  let readers: Array<string | undefined> = []
  for (let asked = 0; asked < 200 && readers.length < 2; asked++) {
    if (asked > 0) await new Promise((resolve) => setTimeout(resolve, 10))
    const clients = String(await redis.command('CLIENT', 'LIST'))
    readers = clients.split('\n').filter((line) => / cmd=xread/.test(line)).map((line) => /^id=(\d+)/.exec(line)?.[1])
  }
  t.equal(readers.length, 2, 'one blocking reader per instance')
  for (const id of readers) await redis.command('CLIENT', 'KILL', 'ID', id as string)
  for (let n = 1; n < 30; n++) await a.app.sse.broadcast({ n })
  await waitFor('all 30 on B', () => onB.events.length === 30)
  t.same(numbers(onB), Array.from({ length: 30 }, (_, n) => n), 'read on after the last delivered id')
  onB.destroy()
})

t.test('the publisher\'s connection dropped: one "down" and one "up" line, never "up" on what it knew before', async (t) => {
  const lines: string[] = []
  const record = (msg: string): void => { lines.push(msg.replace(/^tower-sse: Redis bus is (up|down).*$/, '$1')) }
  const b = bus(freshKey(), { log: { warn: record, info: record } })
  t.teardown(() => b.close())
  await b.subscribe(() => 1, () => {})
  await waitFor('up', () => b.stats().state === 'up')
  // The reader stays connected (blocked in XREAD), so it is ready when the publisher comes back.
  const clients = String(await redis.command('CLIENT', 'LIST')).split('\n')
  const publisher = clients.filter((line) => /^id=\d+ /.test(line) && !/ cmd=(xread|client\|list) /.test(line)).map((line) => /^id=(\d+)/.exec(line)?.[1] as string)
  t.equal(publisher.length, 1, 'one connection besides the reader and this one')
  await redis.command('CLIENT', 'KILL', 'ID', publisher[0])
  await waitFor('down', () => lines.includes('down'))
  await waitFor('up again', () => b.stats().state === 'up')
  // "Up" only once the new connection told who the server is, not on the old connection's facts.
  t.same(lines, ['down', 'up'])
})

t.test('a connection ioredis gave up on (status "end", as after a Sentinel failover race) is started again: publishes and reads resume', async (t) => {
  const b = bus()
  t.teardown(() => b.close())
  const delivered: string[] = []
  await b.subscribe((event) => { delivered.push(event.data); return 1 }, () => {})
  await waitFor('up', () => b.stats().state === 'up')
  // disconnect() leaves a connection where ioredis's give-up does: status "end", no reconnect of its own.
  const { publisher, reader } = b as unknown as { publisher: Redis, reader: Redis }
  // Twice: a second failover race ends the restarted connections again.
  for (const round of ['after', 'after again']) {
    const ended = Promise.all([publisher, reader].map((connection) => new Promise((resolve) => connection.once('end', resolve))))
    publisher.disconnect()
    reader.disconnect()
    await ended
    await waitFor(`the bus up again on new connections (${round})`, () => b.stats().state === 'up', 10_000)
    await b.publish({ data: round })
    await waitFor(`the event read back (${round})`, () => delivered.includes(round))
  }
  t.same(delivered, ['after', 'after again'])
})

t.test('the publish deadline is sent in Redis\'s clock: a local clock an hour behind Redis\'s still publishes', async (t) => {
  const behind = bus(freshKey(), { now: () => Date.now() - 3_600_000 })
  t.teardown(() => behind.close())
  const delivered: string[] = []
  await behind.subscribe((event) => { delivered.push(event.data); return 1 }, () => {})
  const published = await behind.publish({ data: 'on time' })
  t.equal(published.delivered, 1, 'Redis ran it before its deadline (in local time it would be an hour past)')
  t.same(delivered, ['on time'])
})

t.test('30 publishes made in one turn (one call to Redis each): delivered in call order, each caller answered with its own id; a key repeated in the turn lands once', async (t) => {
  const b = bus()
  t.teardown(() => b.close())
  const delivered: BusEvent[] = []
  await b.subscribe((event) => { delivered.push(event); return 1 }, () => {})
  const messages = Array.from({ length: 30 }, (_, n) => n === 25
    ? { data: JSON.stringify({ n: 20 }), idempotencyKey: 'again', idempotencyHash: 'h20' }
    : { data: JSON.stringify({ n }), ...(n === 20 ? { idempotencyKey: 'again', idempotencyHash: 'h20' } : {}) })
  const results = await Promise.all(messages.map((message) => b.publish(message)))
  await waitFor('29 events delivered', () => delivered.length === 29)
  const landed = messages.map((_, n) => n).filter((n) => n !== 25)
  t.same(delivered.map((event) => JSON.parse(event.data).n), landed, 'in the order published, the repeated key once')
  t.same(results.filter((_, n) => n !== 25).map((result) => result.id), delivered.map((event) => event.id), 'each caller its own event\'s id')
  t.same(results[25], { id: results[20].id, delivered: 0 }, 'the repeat got the first publish\'s id, and delivered nothing new')
})

t.test('an idempotency key lives idempotencyWindowMs in Redis, no longer', async (t) => {
  const key = freshKey()
  const windowMs = 5000
  const b = bus(key, { idempotencyWindowMs: windowMs })
  t.teardown(() => b.close())
  await b.subscribe(() => 1, () => {})
  await b.publish({ data: 'once', idempotencyKey: 'k-1' })
  const keys = await redis.command('KEYS', `{${key}}*`) as string[]
  const ttls = await Promise.all(keys.map(async (k) => Number(await redis.command('PTTL', k))))
  const expiring = ttls.filter((ms) => ms >= 0)
  t.equal(expiring.length, 1, `one key with a TTL among ${keys.join(', ')}: the idempotency key (stream and meta have none)`)
  t.ok(expiring[0] > 0 && expiring[0] <= windowMs, `its PTTL ${expiring[0]} ms is within the ${windowMs} ms window`)
})

t.test('Redis killed and restarted: streams stay open, broadcast rejects meanwhile, events after come through', async (t) => {
  const key = freshKey()
  const a = await instance(t, key, { heartbeatMs: 50 })
  const b = await instance(t, key)
  const onA = await connect(a.port)
  const onB = await connect(b.port)
  await waitFor('open', () => a.app.sse.size === 1 && b.app.sse.size === 1)
  await a.app.sse.broadcast({ n: 0 })
  await waitFor('first', () => onB.events.length === 1)
  await redis.kill()
  await waitFor('the bus to be down', () => a.app.sse.stats().bus.state === 'down' && b.app.sse.stats().bus.state === 'down')
  // The reader can see the kill before the publisher does (a publish sent meanwhile waits out its
  // deadline: outcome unknown, seen once on a loaded machine); then every broadcast is refused at once.
  for (let tries = 1; ; tries++) {
    const answer = await a.app.sse.broadcast({ n: -1 }).then(() => 'published', (error: { code: string }) => error.code)
    if (answer === 'TOWER_SSE_BUS_UNAVAILABLE') break
    if (tries === 10) throw new Error(`10 broadcasts after the kill, the last answered ${answer}: the publisher never saw it`)
  }
  await t.rejects(a.app.sse.broadcast({ n: -1 }), { code: 'TOWER_SSE_BUS_UNAVAILABLE', statusCode: 503 })
  const beats = onA.comments.length
  await waitFor('heartbeats go on', () => onA.comments.length > beats + 2)
  t.notOk(onA.isEnded() || onB.isEnded(), 'streams stay open')
  await redis.start()
  await waitFor('the bus to be up again', () => a.app.sse.stats().bus.state === 'up' && b.app.sse.stats().bus.state === 'up', 10_000)
  for (let n = 1; n < 5; n++) await a.app.sse.broadcast({ n })
  await waitFor('events after the outage', () => numbers(onB).length === 5 && numbers(onA).length === 5)
  // Restarted empty: whether an event acknowledged before the kill was lost cannot be known, so one resync each.
  t.same(received(onB), [0, 'resync', 1, 2, 3, 4], 'nothing refused reached anyone; one resync for the lost history')
  t.same(received(onA), [0, 'resync', 1, 2, 3, 4])
  for (const c of [onA, onB]) c.destroy()
})

t.test('the redis option is checked at register time', async (t) => {
  for (const bad of ['http://127.0.0.1:6379', 'not a url', 42, { status: 'ready' }]) {
    await t.rejects(startApp({ redis: bad as string }), { name: 'TowerSseOptionError', option: 'redis' }, JSON.stringify(bad))
  }
  // A URL that is not Redis's is shown as its scheme only: nothing of its user-info.
  const refused = await startApp({ redis: 'http://user:secret@127.0.0.1:1/' }).then(() => null, (error: Error) => error)
  t.match(refused?.message, /got "http:\/\/…"/, 'the scheme, to say what was wrong')
  t.notMatch(refused?.message, /secret|user/, 'no password in the message')
  await t.rejects(startApp({ redis: { url: 'redis://127.0.0.1:1', key: 'a key' } }), { name: 'TowerSseOptionError', option: 'redis.key' })
  await t.rejects(startApp({ redis: 'redis://127.0.0.1:1' }), { code: 'TOWER_SSE_BUS_START' }, 'an unreachable Redis fails the register')
})

t.test('an ioredis client of the app: used and duplicated for the reader, never closed by the plugin', async (t) => {
  const client = new Redis(redis.url)
  t.teardown(() => client.disconnect())
  const key = freshKey()
  const withClient = await startApp({ redis: { client, key } })
  const withUrl = await instance(t, key)
  const c = await connect(withUrl.port)
  await waitFor('open', () => withUrl.app.sse.size === 1)
  await withClient.app.sse.broadcast({ n: 1 })
  await waitFor('delivered across', () => c.events.length === 1)
  await withClient.app.close()
  t.equal(client.status, 'ready', 'the app\'s client is still open')
  t.equal(client.listenerCount('error'), 0, 'and the plugin left no listener on it')
  c.destroy()
})
