import t, { type Test } from 'tap'
import type { TowerSseOptions } from '../lib/index'
import { startApp, type TestApp } from './fixtures/app'
import { startPausableProxy } from './fixtures/pausable-proxy'
import { startRedis, type RedisServer } from './fixtures/redis-server'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

// Redis failing slowly, partially or lossily (issue 19): each case must end in a resync or a coded
// refusal, never a silent gap or a late delivery.

let keys = 0

async function server (t: Test, options: Parameters<typeof startRedis>[0] = {}): Promise<RedisServer> {
  const started = await startRedis(options)
  t.teardown(() => started.stop())
  return started
}

async function instance (t: Test, url: string, redisKey: string, options: TowerSseOptions = {}): Promise<TestApp> {
  const started = await startApp({ redis: url, redisKey, heartbeatMs: 60_000, ...options })
  t.teardown(() => started.app.close())
  return started
}

/** What a stream got, in order: each event's n, or 'resync'. */
function received (c: SseConnection): Array<number | 'resync'> {
  return c.events.map((e) => e.event === 'resync' ? 'resync' : JSON.parse(e.data).n)
}

async function open (t: Test, app: TestApp, headers: Record<string, string> = {}): Promise<SseConnection> {
  const c = await connect(app.port, '/api/events', headers)
  t.teardown(() => c.destroy())
  return c
}

t.test('Redis stalled: broadcast settles with a coded error, the bus leaves up, and Redis refuses the late writes', async (t) => {
  const redis = await server(t)
  t.teardown(() => redis.resume())
  const a = await instance(t, redis.url, `g${++keys}`)
  const live = await open(t, a)
  await waitFor('open', () => a.app.sse.size === 1)
  await a.app.sse.broadcast({ n: 0 })

  redis.pause()
  const leftUp = waitFor('the bus to leave up', () => a.app.sse.stats().bus.state !== 'up', 3000)
  const sent = await Promise.allSettled([1, 2].map((n) => a.app.sse.broadcast({ n })))
  t.same(sent.map((s) => s.status === 'rejected' && (s.reason as { code: string }).code), ['TOWER_SSE_PUBLISH_UNKNOWN', 'TOWER_SSE_PUBLISH_UNKNOWN'],
    'sent before the stall was seen: settled at the deadline, outcome unknown')
  await leftUp
  await t.rejects(a.app.sse.broadcast({ n: 3 }), { code: 'TOWER_SSE_BUS_UNAVAILABLE' }, 'once the stall is seen: refused at once')

  redis.resume()
  await waitFor('the bus to be up again', () => a.app.sse.stats().bus.state === 'up')
  await a.app.sse.broadcast({ n: 4 })
  await waitFor('the event after the stall', () => received(live).at(-1) === 4)
  t.same(received(live), [0, 4], 'the publishes queued behind the stall ran past their deadline: Redis refused them')
  t.equal(await redis.command('XLEN', `g${keys}:stream`), 3, 'the marker, 0 and 4: nothing else landed')
})

t.test('restart from an RDB snapshot losing a tail: a client resuming from before the loss gets a resync, not the survivors', async (t) => {
  const redis = await server(t, { persistent: true })
  const key = `g${++keys}`
  const a = await instance(t, redis.url, key)
  const live = await open(t, a)
  await waitFor('open', () => a.app.sse.size === 1)
  const ids: string[] = []
  for (let n = 0; n < 5; n++) ids.push((await a.app.sse.broadcast({ n })).id)
  await redis.command('SAVE')
  for (let n = 5; n < 10; n++) ids.push((await a.app.sse.broadcast({ n })).id)
  await waitFor('ten live events', () => live.events.length === 10)
  await redis.kill()
  await redis.start()

  const fresh = await instance(t, redis.url, key)
  const resumed = await open(t, fresh, { 'last-event-id': ids[2] })
  const first = await resumed.nextEvent(0)
  t.equal(first.event, 'resync', 'events 3 and 4 survived, 5-9 did not: no replay can be trusted')

  await waitFor('the old instance to be up', () => a.app.sse.stats().bus.state === 'up', 10_000)
  await fresh.app.sse.broadcast({ n: 10 })
  await waitFor('the next event on the live stream', () => received(live).at(-1) === 10)
  t.same(received(live), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 'resync', 10], 'the live stream had seen 5-9: told once, then goes on')
  t.equal(a.app.sse.stats().bus.discontinuities, 1)
})

t.test('restart from a snapshot holding every event delivered: the live stream goes on without a resync', async (t) => {
  const redis = await server(t, { persistent: true })
  const key = `g${++keys}`
  const a = await instance(t, redis.url, key)
  const live = await open(t, a)
  await waitFor('open', () => a.app.sse.size === 1)
  for (let n = 0; n < 3; n++) await a.app.sse.broadcast({ n })
  await redis.command('SAVE')
  await redis.kill()
  await redis.start()
  await waitFor('the bus to be up again', () => a.app.sse.stats().bus.state === 'up', 10_000)
  let published = false
  for (let tries = 0; !published && tries < 50; tries++) {
    published = await a.app.sse.broadcast({ n: 3 }).then(() => true, async () => { await new Promise((resolve) => setTimeout(resolve, 100)); return false })
  }
  t.ok(published, 'publishing again after the restart')
  await waitFor('3 on the live stream', () => received(live).at(-1) === 3)
  t.same(received(live), [0, 1, 2, 3], 'the new epoch\'s marker names the last event this stream had: nothing lost, no resync')
  t.equal(a.app.sse.stats().bus.discontinuities, 0)
})

t.test('an entry deleted from the middle of the stream: a resume across the hole gets a resync, not the rest', async (t) => {
  const redis = await server(t)
  const key = `g${++keys}`
  const a = await instance(t, redis.url, key)
  const ids: string[] = []
  for (let n = 0; n < 6; n++) ids.push((await a.app.sse.broadcast({ n })).id)
  await redis.command('XDEL', `${key}:stream`, ids[3].split('-').slice(1).join('-'))
  const fresh = await instance(t, redis.url, key)
  const across = await open(t, fresh, { 'last-event-id': ids[1] })
  t.equal((await across.nextEvent(0)).event, 'resync', 'found its id, but not every event after it')
  const after = await open(t, fresh, { 'last-event-id': ids[4] })
  await fresh.app.sse.broadcast({ n: 6 })
  await waitFor('the events after the hole', () => received(after).at(-1) === 6)
  t.same(received(after), [5, 6], 'a resume that does not cross the hole replays')
})

t.test('ids going backwards inside an epoch: publishes settle, streams resync, delivery goes on', async (t) => {
  const redis = await server(t)
  const key = `g${++keys}`
  const a = await instance(t, redis.url, key)
  const live = await open(t, a)
  await waitFor('open', () => a.app.sse.size === 1)
  let lastId = ''
  for (let n = 0; n < 3; n++) lastId = (await a.app.sse.broadcast({ n })).id
  const stream = `${key}:stream`
  const meta = `${key}:meta`
  const seq = await redis.command('HGET', meta, 's') as string
  // An entry stamped an hour ahead (a primary whose clock ran ahead), delivered, then lost in a failover.
  const epoch = await redis.command('HGET', meta, 'e') as string
  const next = await redis.command('HINCRBY', meta, 's', 1) as number
  const future = await redis.command('XADD', stream, `${Date.now() + 3_600_000}-0`, 'e', epoch, 'n', next, 'd', '{"n":99}') as string
  await waitFor('the entry from the future', () => received(live).at(-1) === 99)
  // The replica that took over never had it: stream, last id and counter all as before it.
  await redis.command('XDEL', stream, future)
  await redis.command('XSETID', stream, lastId.split('-').slice(1).join('-'))
  await redis.command('HSET', meta, 's', seq)

  const late = await a.app.sse.broadcast({ n: 3 })
  t.match(late.id, /^[0-9a-z]+-\d+-\d+$/, 'a publish below the last delivered id still settles (published)')
  await waitFor('the rollback to be seen', () => a.app.sse.stats().bus.discontinuities === 1)
  const after = await a.app.sse.broadcast({ n: 4 })
  t.equal(after.delivered, 1, 'the next publish is delivered here again')
  await waitFor('4 on the live stream', () => received(live).at(-1) === 4)
  t.same(received(live), [0, 1, 2, 99, 'resync', 4], 'one resync, then on')
  t.not(after.id.split('-')[0], late.id.split('-')[0], 'in a new epoch')
})

t.test('a sequence number met again inside an epoch: never silently dropped, the streams resync', async (t) => {
  const redis = await server(t)
  const key = `g${++keys}`
  const a = await instance(t, redis.url, key)
  const live = await open(t, a)
  await waitFor('open', () => a.app.sse.size === 1)
  for (let n = 0; n < 3; n++) await a.app.sse.broadcast({ n })
  // The counter one behind the stream (restored apart from it): the next publish reuses the last number.
  await redis.command('HINCRBY', `${key}:meta`, 's', -1)
  const reused = await a.app.sse.broadcast({ n: 3 })
  t.equal(reused.delivered, 0, 'settled as published, not delivered under a number already used')
  await a.app.sse.broadcast({ n: 4 })
  await waitFor('4 on the live stream', () => received(live).at(-1) === 4)
  t.same(received(live), [0, 1, 2, 'resync', 4])
})

t.test('an instance paused while the stream is trimmed past its cursor: its streams resync, no silent skip', async (t) => {
  const redis = await server(t)
  const key = `g${++keys}`
  const a = await instance(t, redis.url, key)
  const proxy = await startPausableProxy(redis.port)
  t.teardown(() => proxy.close())
  const b = await instance(t, proxy.url, key)
  const onB = await open(t, b)
  await waitFor('open', () => b.app.sse.size === 1)
  await a.app.sse.broadcast({ n: 0 })
  await waitFor('first on B', () => onB.events.length === 1)

  proxy.pause()
  for (let n = 1; n <= 1500; n += 100) {
    await Promise.all(Array.from({ length: 100 }, (_, i) => a.app.sse.broadcast({ n: n + i })))
  }
  t.ok(Number(await redis.command('XLEN', `${key}:stream`)) < 1500, 'the stream was trimmed past B')
  proxy.resume()
  await a.app.sse.broadcast({ n: 1501 })
  await waitFor('B to catch up', () => received(onB).at(-1) === 1501, 10_000)
  const got = received(onB)
  t.equal(got.filter((e) => e === 'resync').length, 1, 'one resync')
  const resyncAt = got.indexOf('resync')
  const numbers = got.filter((e): e is number => e !== 'resync')
  t.same(numbers, [...numbers].sort((x, y) => x - y), 'in order')
  const afterResync = got.slice(resyncAt + 1) as number[]
  t.same(afterResync, Array.from({ length: afterResync.length }, (_, i) => afterResync[0] + i), 'contiguous after the resync')
  t.ok(resyncAt <= 2, 'the resync comes where the gap is')
  t.equal(b.app.sse.stats().bus.discontinuities, 1)
})

t.test('a backlog of 4 KB events after a pause: caught up without dropping a healthy stream', async (t) => {
  const redis = await server(t)
  const key = `g${++keys}`
  const a = await instance(t, redis.url, key)
  const proxy = await startPausableProxy(redis.port)
  t.teardown(() => proxy.close())
  const b = await instance(t, proxy.url, key)
  const streams = await Promise.all(Array.from({ length: 5 }, () => open(t, b)))
  await waitFor('open', () => b.app.sse.size === 5)

  proxy.pause()
  const pad = 'x'.repeat(4096)
  for (let n = 0; n < 600; n += 50) {
    await Promise.all(Array.from({ length: 50 }, (_, i) => a.app.sse.broadcast({ n: n + i, pad })))
  }
  proxy.resume()
  await waitFor('every stream to get all 600', () => streams.every((c) => c.events.length === 600), 10_000)
  t.equal(b.app.sse.stats().dropped, 0, 'no stream dropped as slow')
  for (const c of streams) t.same(received(c), Array.from({ length: 600 }, (_, n) => n))
})

t.test('publishes in flight are bounded: beyond maxPendingPublishes refused at once, the rest settle at their deadline', async (t) => {
  const redis = await server(t)
  const proxy = await startPausableProxy(redis.port)
  t.teardown(() => proxy.close())
  const b = await instance(t, proxy.url, `g${++keys}`, { maxPendingPublishes: 2, publishTimeoutMs: 300 })
  proxy.pause()
  const waiting = [b.app.sse.broadcast({ n: 0 }), b.app.sse.broadcast({ n: 1 })].map((p) => p.then(() => 'published', (e: { code: string }) => e.code))
  await t.rejects(b.app.sse.broadcast({ n: 2 }), { code: 'TOWER_SSE_BUS_BUSY', statusCode: 503 })
  t.same(await Promise.all(waiting), ['TOWER_SSE_PUBLISH_UNKNOWN', 'TOWER_SSE_PUBLISH_UNKNOWN'])
  proxy.resume()
  // The watchdog's TIME went after both scripts on the same connection: answered, they were run (or refused).
  await waitFor('the bus to be up again', () => b.app.sse.stats().bus.state === 'up')
  t.equal(await redis.command('XLEN', `g${keys}:stream`), 1, 'only the marker: Redis refused both when they reached it')
})

t.test('evictable keys: allkeys-* refuses the register with a coded error naming the setting; volatile-* is fine', async (t) => {
  const lru = await server(t, { args: ['--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru'] })
  const refused = startApp({ redis: lru.url })
  refused.then(({ app }) => t.teardown(() => app.close()), () => undefined)
  await t.rejects(refused, { code: 'TOWER_SSE_BUS_EVICTABLE', message: /allkeys-lru/ })
  await lru.command('CONFIG', 'SET', 'maxmemory-policy', 'volatile-lru')
  const ok = await instance(t, lru.url, `g${++keys}`)
  t.equal(ok.app.sse.stats().bus.state, 'up', 'our keys carry no TTL: volatile-* cannot evict them')
})
