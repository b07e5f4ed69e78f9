import { withTestClocks } from '../lib/testing'
import t from 'tap'
import { startApp } from './fixtures/app'
import { connect, rawStream, waitFor } from './fixtures/sse-connection'

t.test('stream headers, retry: first, then the initial event', async (t) => {
  const { app, port } = await startApp({
    initialEvent: (client) => ({ data: { type: 'connected', id: client.id } })
  })
  t.teardown(() => app.close())
  const c = await connect(port)
  t.equal(c.status, 200)
  t.equal(c.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(c.headers['cache-control'], 'no-cache, no-transform')
  t.equal(c.headers['x-accel-buffering'], 'no')
  t.equal(c.headers.connection, 'close')
  const first = await c.nextEvent(0)
  t.match(c.body, /^retry: \d+\n\n/, 'the first frame is retry:')
  const [client] = [...app.sse]
  t.same(JSON.parse(first.data), { type: 'connected', id: client.id })
  t.ok(client.connectedAt <= Date.now())
  t.ok(client.expiresAt !== null && client.expiresAt > client.connectedAt)
  c.destroy()
})

t.test('retry: is drawn per client within retryMs ± 20%', async (t) => {
  const { app, port } = await startApp({ retryMs: 5000 })
  t.teardown(() => app.close())
  const conns = await Promise.all(Array.from({ length: 40 }, () => connect(port)))
  await waitFor('every retry: frame', () => conns.every((c) => c.retries.length === 1))
  const values = conns.map((c) => c.retries[0])
  t.ok(values.every((v) => v >= 4000 && v <= 6000), `all in [4000, 6000]: ${values.join(',')}`)
  t.ok(new Set(values).size > 10, 'clients get different values, not one constant')
  for (const c of conns) c.destroy()
})

t.test('retry: bounds are reached exactly with an extreme random source', async (t) => {
  for (const [draw, expected] of [[0, 4000], [0.9999999, 6000]] as const) {
    const { app, port } = await startApp(withTestClocks({ retryMs: 5000 }, { random: () => draw }))
    const c = await connect(port)
    await waitFor('retry frame', () => c.retries.length === 1)
    t.equal(c.retries[0], expected)
    c.destroy()
    await app.close()
  }
})

t.test('the shared heartbeat reaches every client as a comment', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 40 })
  t.teardown(() => app.close())
  const conns = await Promise.all([connect(port), connect(port), connect(port)])
  await waitFor('two heartbeats on every stream', () => conns.every((c) => c.comments.length >= 2))
  t.pass('heartbeats arrived')
  t.equal(conns[0].events.length, 0, 'a heartbeat is not an event')
  for (const c of conns) c.destroy()
})

t.test('a client that stops reading is swept as dead after missed heartbeats', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 200, maxBufferedBytes: 256 * 1024 * 1024 })
  t.teardown(() => app.close())
  const healthy = rawStream(port)
  const stalled = rawStream(port)
  await waitFor('both streams open', () => app.sse.size === 2 && stalled.received() > 0)
  stalled.socket.pause()
  // Enough to fill the kernel buffers and then the server's own queue for the stalled client.
  const chunk = 'x'.repeat(1024 * 1024)
  for (let i = 0; i < 16; i++) app.sse.broadcast(chunk)
  await waitFor('the stalled client to be swept', () => app.sse.stats().deadSwept >= 1, 10_000)
  t.equal(app.sse.stats().deadSwept, 1, 'only the stalled client is swept')
  t.equal(app.sse.size, 1)
  await waitFor('the healthy client to receive all 16 MiB', () => healthy.received() > 16 * 1024 * 1024, 10_000)
  t.equal(healthy.socket.destroyed, false, 'the healthy client stays connected')
  stalled.socket.destroy()
  healthy.socket.destroy()
})

t.test('max age: the server ends the stream at its drawn lifetime within maxAgeMs ± 20%, with a fresh retry: last', async (t) => {
  const { app, port } = await startApp({ maxAgeMs: 400 })
  t.teardown(() => app.close())
  const c = await connect(port)
  await waitFor('stream open', () => app.sse.size === 1)
  const [info] = [...app.sse]
  const lifetime = (info.expiresAt as number) - info.connectedAt
  t.ok(lifetime >= 320 && lifetime <= 480, `lifetime ${lifetime} ms drawn from [320, 480]`)
  await c.ended
  t.equal(c.retries.length, 2, 'the stream\'s last frame is a retry: of its own')
  t.ok(c.retries.every((ms) => ms >= 4000 && ms <= 6000), `each within retryMs ± 20%: ${c.retries.join(', ')}`)
  // The end comes at the drawn expiry, not at once (within what libuv's cached loop time, which a
  // busy machine leaves behind Date.now(), can take off a timer).
  t.ok(Date.now() >= info.connectedAt + lifetime / 2, `ended at its expiry, not at once (${Date.now() - info.connectedAt} ms of ${lifetime})`)
  t.equal(app.sse.stats().expired, 1, 'by the server, as an expiry')
  t.equal(app.sse.size, 0)
})

t.test('100 clients that connect together expire spread across the jitter window', async (t) => {
  // maxAgeMs ± 20%: a 1000 ms window, [2000, 3000].
  const { app, port } = await startApp({ maxClients: 100, maxAgeMs: 2500 })
  t.teardown(() => app.close())
  const conns = await Promise.all(Array.from({ length: 100 }, () => connect(port)))
  const planned = [...app.sse].map((c) => (c.expiresAt as number) - c.connectedAt)
  t.ok(planned.every((ms) => ms >= 2000 && ms <= 3000), 'every lifetime drawn inside [2000, 3000]')
  const expiries = [...app.sse].map((c) => c.expiresAt as number)
  const first = Math.min(...expiries)
  const spread = Math.max(...expiries) - first
  const buckets = new Set(expiries.map((ms) => Math.floor((ms - first) / 50)))
  t.ok(spread >= 500, `expiries planned over ${spread} ms of a 1000 ms window`)
  t.ok(buckets.size >= 10, `expiries fall in ${buckets.size} distinct 50 ms slots, not one burst`)
  await Promise.all(conns.map((c) => c.ended))
  t.equal(app.sse.stats().expired, 100, 'each ended by its own expiry')
  t.comment(`expiry spread ${spread} ms across ${buckets.size} of 20 slots`)
})

t.test('maxAgeMs 0 disables expiry', async (t) => {
  const { app, port } = await startApp({ maxAgeMs: 0 })
  t.teardown(() => app.close())
  const c = await connect(port)
  await waitFor('stream open', () => app.sse.size === 1)
  t.equal([...app.sse][0].expiresAt, null)
  c.destroy()
})

t.test('broadcast: encoded once, delivered to every client, returns the count', async (t) => {
  const { app, port } = await startApp()
  t.teardown(() => app.close())
  const conns = await Promise.all(Array.from({ length: 5 }, () => connect(port)))
  await waitFor('5 streams', () => app.sse.size === 5)
  t.equal((await app.sse.broadcast({ hello: 'world' })).delivered, 5)
  t.equal((await app.sse.broadcast('line one\nline two', { event: 'note' })).delivered, 5)
  await waitFor('both events everywhere', () => conns.every((c) => c.events.length === 2))
  for (const c of conns) {
    t.same(JSON.parse(c.events[0].data), { hello: 'world' })
    t.equal(c.events[1].event, 'note')
    t.equal(c.events[1].data, 'line one\nline two')
  }
  await t.rejects(app.sse.broadcast('x', { event: 'bad\nevent: injected' }), { code: 'TOWER_SSE_BAD_FIELD' })
  for (const c of conns) c.destroy()
  await waitFor('all gone', () => app.sse.size === 0)
  t.equal((await app.sse.broadcast('nobody')).delivered, 0)
})

t.test('a client over its byte budget is dropped while others keep receiving', async (t) => {
  const { app, port } = await startApp({ maxBufferedBytes: 2 * 1024 * 1024, heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const healthy = await connect(port)
  const { socket: stalled } = rawStream(port)
  await waitFor('both streams open', () => app.sse.size === 2)
  stalled.pause()
  const chunk = 'y'.repeat(256 * 1024)
  for (let i = 0; i < 80; i++) {
    app.sse.broadcast(chunk)
    await new Promise((resolve) => setImmediate(resolve))
  }
  await waitFor('the stalled client to be dropped', () => app.sse.stats().dropped === 1)
  t.equal(app.sse.size, 1)
  await waitFor('the healthy client to receive all 80', () => healthy.events.length === 80, 10_000)
  stalled.destroy()
  healthy.destroy()
})
