import t from 'tap'
import UnderPressure from '@fastify/under-pressure'
import Fastify from 'fastify'
import towerSse from '../lib'
import { startApp } from './fixtures/app'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

t.test('500 concurrent clients at maxClients 200: 200 streams, 300 refusals, no stream closed', async (t) => {
  // tarpitMs 0: answer every refusal at once here; slow rejection has its own test.
  const { app, port } = await startApp({ maxClients: 200, heartbeatMs: 60_000, storm: { tarpitMs: 0 } })
  t.teardown(() => app.close())
  const conns = await Promise.all(Array.from({ length: 500 }, () => connect(port)))
  const open = conns.filter((c) => c.status === 200)
  const refused = conns.filter((c) => c.status === 503)
  t.equal(open.length, 200, 'exactly 200 streams admitted')
  t.equal(refused.length, 300, 'the other 300 refused with 503')
  await Promise.all(refused.map((c) => c.ended))
  for (const c of refused) {
    const retryAfter = Number(c.headers['retry-after'])
    if (!(retryAfter >= 5 && retryAfter <= 60) || c.headers.connection !== 'close' ||
        !String(c.headers['content-type']).startsWith('application/json')) {
      t.fail(`bad refusal headers: ${JSON.stringify(c.headers)}`)
      break
    }
  }
  const body = JSON.parse(refused[0].body)
  t.equal(body.statusCode, 503)
  t.equal(body.retryAfterSeconds, Number(refused[0].headers['retry-after']), 'the body repeats Retry-After')
  t.equal(body.reason, 'capacity')
  t.equal(body.code, 'TOWER_SSE_CAPACITY')
  t.match(body.message, /all 200 event streams are in use/)
  t.equal(app.sse.size, 200)
  // An event written after every admission reaches only the streams still open: an evicted one ended before it.
  await app.sse.broadcast('after the storm')
  await waitFor('the event to reach every stream still open', () => open.every((c) => c.isEnded() || c.events.length === 1))
  t.equal(open.filter((c) => c.isEnded()).length, 0, 'no admitted stream was closed to admit another')
  const stats = app.sse.stats()
  t.equal(stats.accepted, 200)
  t.equal(stats.rejected, 300)
  t.equal(stats.peak, 200)
  t.equal(stats.capacity, 200)
  for (const c of open) c.destroy()
})

t.test('a disconnect frees a slot for the next client', async (t) => {
  const { app, port } = await startApp({ maxClients: 2 })
  t.teardown(() => app.close())
  const a = await connect(port)
  const b = await connect(port)
  const refused = await connect(port)
  t.same([a.status, b.status, refused.status], [200, 200, 503])
  a.destroy()
  await waitFor('the registry to notice the disconnect', () => app.sse.size === 1)
  t.equal(app.sse.stats().disconnected, 1)
  const c = await connect(port)
  t.equal(c.status, 200, 'the freed slot is given to the next client')
  t.equal(b.isEnded(), false)
  b.destroy()
  c.destroy()
})

t.test('a disconnect frees its key\'s slot too: maxClientsPerKey counts only the streams still open', async (t) => {
  const { app, port } = await startApp({ maxClients: 10, maxClientsPerKey: 1, storm: false, keyFn: (request) => String(request.headers['x-user']) })
  t.teardown(() => app.close())
  const first = await connect(port, '/api/events', { 'x-user': 'alice' })
  const second = await connect(port, '/api/events', { 'x-user': 'alice' })
  t.same([first.status, second.status], [200, 429], 'one stream for alice')
  first.destroy()
  await waitFor('the registry to notice the disconnect', () => app.sse.size === 0)
  const again = await connect(port, '/api/events', { 'x-user': 'alice' })
  t.equal(again.status, 200, 'alice\'s slot is hers again')
  t.equal(app.sse.close({ key: 'alice' }, 'logout'), 1, 'and her key addresses the open stream alone')
  await again.ended
})

t.test('admission is on the SSE route only: other routes answer normally at capacity', async (t) => {
  const app = Fastify()
  await app.register(towerSse, { maxClients: 1 })
  app.get('/health', async () => ({ ok: true }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const port = (app.server.address() as { port: number }).port
  const held = await connect(port)
  t.equal(held.status, 200)
  const health = await fetch(`http://127.0.0.1:${port}/health`)
  t.equal(health.status, 200)
  t.same(await health.json(), { ok: true })
  held.destroy()
})

t.test('@fastify/under-pressure registered plainly: a stream gets tower-sse\'s refusal, other routes under-pressure\'s', async (t) => {
  let healthy = true
  const errors: string[] = []
  const logger = { level: 'error', stream: { write: (line: string) => { errors.push(line) } } }
  const app = Fastify({ logger })
  await app.register(UnderPressure, { healthCheck: async () => healthy, healthCheckInterval: 10 })
  await app.register(towerSse, { maxClients: 10 })
  app.get('/other', async () => 'ok')
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const port = (app.server.address() as { port: number }).port
  const before = await connect(port)
  t.equal(before.status, 200, 'admitted while healthy')
  healthy = false
  await waitFor('under-pressure to see the failed health check', () => app.isUnderPressure())
  const during = await connect(port)
  t.equal(during.status, 503)
  t.ok(Number(during.headers['retry-after']) >= 5, 'with a Retry-After')
  await during.ended
  t.match(JSON.parse(during.body), { code: 'TOWER_SSE_PRESSURE', message: /under pressure/ })
  t.equal(app.sse.stats().refusals.pressure, 1, 'counted as a pressure refusal')
  const other = await fetch(`http://127.0.0.1:${port}/other`)
  t.same([other.status, (await other.json() as { code: string }).code], [503, 'FST_UNDER_PRESSURE'], 'another route still gets under-pressure\'s own answer')
  t.equal(errors.filter((line) => line.includes('TOWER_SSE') || line.includes('/api/events')).length, 0, 'no error log line for the refused stream')
  t.equal(before.isEnded(), false, 'pressure refuses new streams, it does not close open ones')
  before.destroy()
})

t.test('a refused request is finished and its socket closed by the server; nothing is kept for it', async (t) => {
  // tarpitMs 0: 20 quick refusals are a storm, and held refusals have their own test.
  const { app, port } = await startApp({ maxClients: 1, storm: { tarpitMs: 0 } })
  t.teardown(() => app.close())
  const held = await connect(port)
  const refusals: SseConnection[] = []
  for (let i = 0; i < 20; i++) refusals.push(await connect(port))
  await Promise.all(refusals.map((c) => c.ended))
  const open = await new Promise<number>((resolve, reject) =>
    app.server.getConnections((err, count) => err ? reject(err) : resolve(count)))
  t.equal(open, 1, 'only the admitted stream still holds a connection')
  t.equal(app.sse.size, 1)
  t.equal(app.sse.stats().rejected, 20)
  held.destroy()
})
