// A stream route outside the plugin's context — `eventStream: true` in a plugin registered beside, not
// inside, the one that registers tower-sse (the @fastify/autoload layout: plugins/sse.ts without
// fastify-plugin, routes/events.ts) — is refused where it is declared: app.ready() rejects with
// TOWER_SSE_ROUTE_OUTSIDE, naming the route and the fix, instead of a 500 about `undefined` on every
// request. A route in a child context of the registration works, and so does the fix the error names;
// two registrations in two sibling contexts each own their routes.
import type { AddressInfo } from 'node:net'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify'
import fp from 'fastify-plugin'
import towerSse, { sseOf } from '../lib'
import { connect } from './fixtures/sse-connection'

/** plugins/sse.ts as a newcomer writes it: an encapsulated plugin that registers tower-sse. */
const ssePlugin: FastifyPluginAsync = async (fastify) => {
  await fastify.register(towerSse, { path: false, heartbeatMs: 60_000 })
}

/** routes/events.ts: a stream route in a plugin of its own. */
const eventsRoute: FastifyPluginAsync = async (fastify) => {
  fastify.get('/events', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ initialEvent: { data: 'hi' } }))
}

async function listen (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

t.test('a stream route in a sibling plugin of the one that registers tower-sse: ready() rejects with TOWER_SSE_ROUTE_OUTSIDE, naming the route and the fix', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  // As @fastify/autoload registers them: one after the other, then ready().
  void app.register(ssePlugin)
  void app.register(eventsRoute)
  const error = await app.ready().then(() => null, (err: Error & { code?: string }) => err)
  t.ok(error, 'refused at start-up, not on the first request')
  t.equal(error?.code, 'TOWER_SSE_ROUTE_OUTSIDE')
  t.match(error?.message, 'GET /events', 'names the route')
  t.match(error?.message, 'no tower-sse is registered in its context or above')
  t.match(error?.message, /Register tower-sse in a parent of this route's plugin, or .*fastify-plugin's fp\(\)/, 'and the fix')
})

t.test('the fix the error names: the plugin that registers tower-sse wrapped in fastify-plugin, the sibling\'s route streams', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(fp(ssePlugin))
  await app.register(eventsRoute)
  const port = await listen(app)
  t.teardown(() => app.close())
  const stream = await connect(port, '/events')
  t.equal(stream.status, 200)
  t.equal((await stream.nextEvent(0)).data, 'hi')
  t.equal(app.sse.size, 1)
  stream.destroy()
})

t.test('a stream route in a child context of the registration streams, on the registration\'s registry', async (t) => {
  const app = Fastify({ logger: false })
  let registration: FastifyInstance | undefined
  await app.register(async (scope) => {
    await scope.register(towerSse, { path: false, maxClients: 1, heartbeatMs: 60_000 })
    registration = scope
    await scope.register(async (child) => {
      await child.register(async (grandchild) => {
        grandchild.get('/deep/events', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ initialEvent: { data: 'deep' } }))
      })
    }, { prefix: '/child' })
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const stream = await connect(port, '/child/deep/events')
  t.equal(stream.status, 200)
  t.equal((await stream.nextEvent(0)).data, 'deep')
  t.equal(sseOf(registration as FastifyInstance).size, 1, 'counted where tower-sse is registered')
  t.equal((await connect(port, '/child/deep/events')).status, 503, 'under its maxClients')
  stream.destroy()
})

t.test('two registrations in two sibling contexts: each owns the routes of its own context', async (t) => {
  const app = Fastify({ logger: false })
  const scopes: Record<string, FastifyInstance> = {}
  for (const name of ['a', 'b']) {
    await app.register(async (scope) => {
      await scope.register(towerSse, { path: false, maxClients: 1, heartbeatMs: 60_000, initialEvent: () => ({ data: `from ${name}` }) })
      scope.get(`/${name}/events`, { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
      scopes[name] = scope
    })
  }
  const port = await listen(app)
  t.teardown(() => app.close())
  const a = await connect(port, '/a/events')
  const b = await connect(port, '/b/events')
  t.same([a.status, b.status], [200, 200], 'each under its own maxClients of 1')
  t.same([(await a.nextEvent(0)).data, (await b.nextEvent(0)).data], ['from a', 'from b'], 'each with its own registration\'s initialEvent')
  t.same([scopes.a.sse.size, scopes.b.sse.size], [1, 1])
  await scopes.a.sse.broadcast('only a')
  t.equal((await a.nextEvent(1)).data, 'only a')
  await scopes.b.sse.broadcast('only b')
  t.equal((await b.nextEvent(1)).data, 'only b')
  t.same([a.events.length, b.events.length], [2, 2], 'a broadcast reaches its own registration\'s streams only')
  t.equal((await connect(port, '/a/events')).status, 503, 'a\'s second stream: a\'s capacity, whatever b holds')
  a.destroy()
  b.destroy()
})
