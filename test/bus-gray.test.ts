import t from 'tap'
import { startApp } from './fixtures/app'
import { instance, liveInstance, open, received, server } from './fixtures/bus-instances'
import { startPausableProxy } from './fixtures/pausable-proxy'
import { waitFor } from './fixtures/sse-connection'

// Redis failing slowly or partially (issue 19): a stall, a paused instance, a backlog, publishes
// beyond the bound, evictable keys — each ends in a resync or a coded refusal, never a silent gap
// or a late delivery.

let keys = 0

t.test('Redis stalled: broadcast settles with a coded error, the bus leaves up, and Redis refuses the late writes', async (t) => {
  const { redis, key, a, live } = await liveInstance(t)
  t.teardown(() => redis.resume())
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
  t.equal(await redis.command('XLEN', `{${key}}:stream`), 3, 'the marker, 0 and 4: nothing else landed')
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
  t.ok(Number(await redis.command('XLEN', `{${key}}:stream`)) < 1500, 'the stream was trimmed past B')
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
  const b = await instance(t, proxy.url, `g${++keys}`, {}, { maxPendingPublishes: 2, publishTimeoutMs: 300 })
  proxy.pause()
  const waiting = [b.app.sse.broadcast({ n: 0 }), b.app.sse.broadcast({ n: 1 })].map((p) => p.then(() => 'published', (e: { code: string }) => e.code))
  await t.rejects(b.app.sse.broadcast({ n: 2 }), { code: 'TOWER_SSE_BUS_BUSY', statusCode: 503 })
  t.same(await Promise.all(waiting), ['TOWER_SSE_PUBLISH_UNKNOWN', 'TOWER_SSE_PUBLISH_UNKNOWN'])
  proxy.resume()
  // The watchdog's TIME went after both scripts on the same connection: answered, they were run (or refused).
  await waitFor('the bus to be up again', () => b.app.sse.stats().bus.state === 'up')
  t.equal(await redis.command('XLEN', `{g${keys}}:stream`), 1, 'only the marker: Redis refused both when they reached it')
})

t.test('evictable keys: allkeys-* refuses the register with a coded error naming the setting; volatile-* is fine', async (t) => {
  const lru = await server(t, { args: ['--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru'] })
  const refused = startApp({ redis: lru.url })
  refused.then(({ app }) => t.teardown(() => app.close()), () => undefined)
  await t.rejects(refused, { code: 'TOWER_SSE_BUS_EVICTABLE', message: /allkeys-lru/ })
  for (const policy of ['allkeys-lfu', 'allkeys-random']) {
    await lru.command('CONFIG', 'SET', 'maxmemory-policy', policy)
    const also = startApp({ redis: lru.url })
    also.then(({ app }) => t.teardown(() => app.close()), () => undefined)
    await t.rejects(also, { code: 'TOWER_SSE_BUS_EVICTABLE', message: new RegExp(policy) }, `${policy} evicts the bus's keys too`)
  }
  await lru.command('CONFIG', 'SET', 'maxmemory-policy', 'volatile-lru')
  const ok = await instance(t, lru.url, `g${++keys}`)
  t.equal(ok.app.sse.stats().bus.state, 'up', 'our keys carry no TTL: volatile-* cannot evict them')
})

t.test('CONFIG disabled (managed Redis): register goes on and says once what it could not check', async (t) => {
  const managed = await server(t, { args: ['--rename-command', 'CONFIG', ''] })
  const lines: string[] = []
  const stream = { write: (line: string) => { lines.push(line) } }
  const started = await startApp({ redis: managed.url }, { logger: { level: 'info', stream } })
  t.teardown(() => started.app.close())
  t.equal(started.app.sse.stats().bus.state, 'up')
  t.equal(lines.filter((line) => line.includes('CONFIG')).length, 1, 'one line')
  t.match(lines.find((line) => line.includes('CONFIG')), /maxmemory-policy.*resync/)
})
