// tower-sse's own refusals on an app's own stream route (prefix, route-level onRequest auth), not
// only on the `path` route: the Host/Origin guard and a plainly registered @fastify/under-pressure.
import t from 'tap'
import UnderPressure from '@fastify/under-pressure'
import Fastify, { type FastifyRequest } from 'fastify'
import towerSse from '../lib'
import { connect, waitFor } from './fixtures/sse-connection'

async function authenticate (request: FastifyRequest): Promise<void> {
  if (request.headers.authorization !== 'Bearer ok') throw Object.assign(new Error('unauthorized'), { statusCode: 401 })
}

t.test('allowedHosts / allowedOrigins refuse on the app\'s own route first, before its auth hook and admission', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, guard: { allowedHosts: ['app.example'], allowedOrigins: ['https://app.example'] } })
  await app.register(async (scope) => {
    scope.get('/u/:id/events', { eventStream: true, onRequest: authenticate }, (_request, reply) => reply.eventStream.subscribe())
  }, { prefix: '/v1' })
  t.teardown(() => app.close())
  const ask = (headers: Record<string, string>) => app.inject({ url: '/v1/u/1/events', headers })
  const host = await ask({ host: 'evil.example' })
  t.same([host.statusCode, host.json().code], [403, 'TOWER_SSE_HOST_NOT_ALLOWED'], 'a foreign Host, unauthenticated: the guard, not the 401')
  const origin = await ask({ host: 'app.example', origin: 'https://evil.example', authorization: 'Bearer ok' })
  t.same([origin.statusCode, origin.json().code], [403, 'TOWER_SSE_ORIGIN_NOT_ALLOWED'])
  t.equal((await ask({ host: 'app.example' })).statusCode, 401, 'an allowed Host reaches the route\'s own auth')
  t.same([app.sse.stats().accepted, app.sse.stats().rejected], [0, 0], 'admission counted none of them')
})

t.test('@fastify/under-pressure registered plainly: the app\'s own route gets tower-sse\'s refusal, before its auth hook', async (t) => {
  let healthy = true
  const app = Fastify({ logger: false })
  await app.register(UnderPressure, { healthCheck: async () => healthy, healthCheckInterval: 10 })
  await app.register(towerSse, { path: false })
  await app.register(async (scope) => {
    scope.get('/u/:id/events', { eventStream: true, onRequest: authenticate }, (_request, reply) => reply.eventStream.subscribe())
  }, { prefix: '/v1' })
  app.get('/plain', async () => 'ok')
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const port = (app.server.address() as { port: number }).port
  const before = await connect(port, '/v1/u/1/events', { authorization: 'Bearer ok' })
  t.equal(before.status, 200, 'admitted while healthy')
  healthy = false
  await waitFor('under-pressure to see the failed health check', () => app.isUnderPressure())
  for (const headers of [{ authorization: 'Bearer ok' }, {}]) {
    const during = await connect(port, '/v1/u/2/events', headers)
    await during.ended
    t.equal(during.status, 503)
    t.ok(Number(during.headers['retry-after']) >= 5, 'with a jittered Retry-After')
    t.match(JSON.parse(during.body), { code: 'TOWER_SSE_PRESSURE' }, 'tower-sse\'s refusal, not FST_UNDER_PRESSURE')
  }
  t.equal(app.sse.stats().refusals.pressure, 2, 'both counted as pressure refusals')
  const other = await fetch(`http://127.0.0.1:${port}/plain`)
  t.same([other.status, (await other.json() as { code: string }).code], [503, 'FST_UNDER_PRESSURE'], 'another route keeps under-pressure\'s answer')
  before.destroy()
})
