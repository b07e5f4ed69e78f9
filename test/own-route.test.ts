// tower-sse in an app's own routes: the route option eventStream, reply.eventStream.subscribe(),
// admission after the app's auth, several routes on one registry, and openings that fail.
import { Writable } from 'node:stream'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import towerSse, { sseOf, topicsFromQuery, type TowerSseOptions } from '../lib'
import { connect, waitFor } from './fixtures/sse-connection'
import { rawExchange } from './fixtures/raw-http'
import { JITTER_RATIO } from '../lib/shared/jitter'
import { MAX_TIMER_MS } from '../lib/shared/option-rules'

declare module 'fastify' {
  interface FastifyRequest {
    user?: { id: string }
  }
}

/** A preHandler auth hook as an app writes one: `authorization: Bearer <user>` or the app's own 401. */
async function authenticate (request: FastifyRequest): Promise<void> {
  await Promise.resolve()
  const token = /^Bearer (\w+)$/.exec(request.headers.authorization ?? '')?.[1]
  if (token === undefined) throw Object.assign(new Error('who are you?'), { statusCode: 401, code: 'APP_UNAUTHORIZED' })
  request.user = { id: token }
}

async function listen (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

/** Fastify's log lines, parsed, as the app's logger writes them. */
function logLines (): { stream: Writable, lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>)
      done()
    }
  })
  return { stream, lines }
}

t.test('own route: keyFn reads request.user set by the route\'s preHandler; anonymous gets the app\'s 401, not 429 or 500', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, maxClientsPerKey: 1, keyFn: (request) => `user:${(request.user as { id: string }).id}`, heartbeatMs: 60_000 })
  app.get('/me/events', { eventStream: true, preHandler: authenticate }, (_request, reply) => reply.eventStream.subscribe())
  const port = await listen(app)
  t.teardown(() => app.close())

  const anonymous = await connect(port, '/me/events')
  t.equal(anonymous.status, 401, 'the app\'s own answer')
  t.match(JSON.parse((await anonymous.ended, anonymous.body)), { code: 'APP_UNAUTHORIZED' })
  const alice = await connect(port, '/me/events', { authorization: 'Bearer alice' })
  t.equal(alice.status, 200)
  const again = await connect(port, '/me/events', { authorization: 'Bearer alice' })
  t.equal(again.status, 429, 'alice\'s second stream is over her limit')
  t.match(JSON.parse((await again.ended, again.body)), { code: 'TOWER_SSE_PER_KEY' })
  const bob = await connect(port, '/me/events', { authorization: 'Bearer bob' })
  t.equal(bob.status, 200, 'bob is another key')
  t.same([app.sse.size, app.sse.stats().refusals.perKey, app.sse.stats().failedOpens], [2, 1, 0])
  t.equal((await connect(port, '/api/events')).status, 404, 'path: false adds no route of the plugin\'s own')
  alice.destroy()
  bob.destroy()
})

t.test('subscribe({ topics, key, initialEvent }) decides for one stream; per-route hooks override the plugin\'s', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000, initialEvent: () => ({ data: 'plugin' }) })
  app.get('/rooms/:room', {
    eventStream: { initialEvent: async (client) => ({ event: 'hello', data: { id: client.id } }) },
    preHandler: authenticate
  }, (request, reply) => reply.eventStream.subscribe({ topics: [`room:${(request.params as { room: string }).room}`], key: `user:${request.user?.id}` }))
  app.get('/plain', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ initialEvent: { data: 'given' } }))
  const port = await listen(app)
  t.teardown(() => app.close())

  const room = await connect(port, '/rooms/blue', { authorization: 'Bearer carol' })
  const plain = await connect(port, '/plain')
  const hello = await room.nextEvent(0)
  t.equal(hello.event, 'hello')
  t.same(JSON.parse(hello.data), { id: [...app.sse][0].id })
  t.equal((await plain.nextEvent(0)).data, 'given')
  await app.sse.broadcast('for blue', { topic: 'room:blue' })
  await app.sse.broadcast('for red', { topic: 'room:red' })
  await waitFor('the blue event', () => room.events.length === 2)
  t.same(room.events.map((e) => e.data), [hello.data, 'for blue'], 'only its own room')
  room.destroy()
  plain.destroy()
})

t.test('two stream routes in one context share one registry: one capacity for both', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { maxClients: 2, heartbeatMs: 60_000 })
  app.get('/a', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
  await app.register(async (scope) => {
    scope.get('/b', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
  }, { prefix: '/nested' })
  const port = await listen(app)
  t.teardown(() => app.close())
  const a = await connect(port, '/a')
  const b = await connect(port, '/nested/b')
  t.same([a.status, b.status], [200, 200])
  const third = await connect(port, '/api/events')
  t.equal(third.status, 503, 'the default route counts against the same capacity')
  t.match(JSON.parse((await third.ended, third.body)), { code: 'TOWER_SSE_CAPACITY' })
  t.same([app.sse.size, app.sse.capacity], [2, 2])
  a.destroy()
  b.destroy()
})

t.test('a second registration in one context is a clear error; in a context of its own it is a registry of its own', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse)
  await t.rejects(async () => { await app.register(towerSse, { path: '/other' }) }, { code: 'TOWER_SSE_ALREADY_REGISTERED', message: /already registered in this context/ })
  await app.close()

  const ok = Fastify({ logger: false })
  await ok.register(towerSse, { maxClients: 1, heartbeatMs: 60_000 })
  let inner: FastifyInstance | undefined
  await ok.register(async (scope) => {
    await scope.register(towerSse, { path: '/inner', maxClients: 1, heartbeatMs: 60_000 })
    scope.get('/inner-own', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
    inner = scope
  })
  const port = await listen(ok)
  t.teardown(() => ok.close())
  const outer = await connect(port, '/api/events')
  const innerStream = await connect(port, '/inner-own')
  t.same([outer.status, innerStream.status], [200, 200], 'each its own capacity of 1')
  t.same([ok.sse.size, inner?.sse.size], [1, 1], 'the inner route belongs to the inner registration only')
  outer.destroy()
  innerStream.destroy()
})

t.test('subscribe() on a route without eventStream rejects, naming the route option', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false })
  app.get('/forgot', (_request, reply) => reply.eventStream.subscribe())
  t.teardown(() => app.close())
  const res = await app.inject({ url: '/forgot' })
  t.equal(res.statusCode, 500)
  t.match(res.json().message, /add the route option eventStream: true to GET \/forgot/)
})

t.test('a route\'s eventStream option is checked when the route is declared', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false })
  t.teardown(() => app.close())
  t.throws(() => app.get('/x', { eventStream: { keyFn: 'user' } as never }, () => {}), { code: 'TOWER_SSE_OPTION', message: /eventStream of GET \/x: keyFn" must be a function/ })
  t.throws(() => app.get('/y', { eventStream: { topics: [] } as never }, () => {}), { code: 'TOWER_SSE_OPTION', message: /one of keyFn, topicsFromRequest, initialEvent/ })
})

/** Every way a stream's opening can fail in the app's code or data, each a 500 and never a stream. */
const FAILURES: Array<[string, Partial<TowerSseOptions>, RegExp]> = [
  ['initialEvent throws', { initialEvent: () => { throw new Error('db down') } }, /db down/],
  ['initialEvent rejects', { initialEvent: async () => { throw new Error('db down, later') } }, /db down, later/],
  ['initialEvent data is a BigInt', { initialEvent: () => ({ data: { n: 1n } }) }, /BigInt/],
  ['initialEvent data is circular', { initialEvent: () => { const data: Record<string, unknown> = {}; data.self = data; return { data } } }, /circular/],
  ['initialEvent event has a newline', { initialEvent: () => ({ event: 'a\nevent: injected', data: 'x' }) }, /event event must/],
  ['topicsFromRequest throws', { topicsFromRequest: () => { throw new Error('no topics today') } }, /no topics today/],
  ['keyFn rejects', { keyFn: async () => { throw new Error('session store down') } }, /session store down/]
]

t.test('a failing opening: 500 through the app\'s error handler, logged with the error, counted, no slot, close() at once', async (t) => {
  for (const [name, options, message] of FAILURES) {
    const { stream, lines } = logLines()
    // maxAgeMs at its largest (its +20% jitter still fits a timer): a stream left open would hold close() for ~20 days.
    const app = Fastify({ logger: { level: 'info', stream } })
    await app.register(towerSse, { maxClients: 1, maxAgeMs: Math.floor(MAX_TIMER_MS / (1 + JITTER_RATIO)), heartbeatMs: 60_000, ...options })
    const port = await listen(app)
    const res = await connect(port)
    await res.ended
    t.equal(res.status, 500, `${name}: 500`)
    t.match(JSON.parse(res.body), { statusCode: 500, message }, `${name}: Fastify's error answer, with the error`)
    t.notOk(res.headers['content-type']?.startsWith('text/event-stream'), `${name}: never a stream`)
    const logged = lines.find((line) => line.level === 50)
    t.match(logged, { err: { message } }, `${name}: logged with the error`)
    t.same([app.sse.size, app.sse.stats().failedOpens, app.sse.stats().accepted], [0, 1, 0], `${name}: counted, no slot`)
    const next = await connect(port)
    t.equal(next.status, 500, `${name}: the slot is free for the next, which fails the same way`)
    await app.close()
    t.pass(`${name}: close() resolved with no stream to wait for`)
  }
})

t.test('a failing opening goes through the app\'s own error handler', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, initialEvent: () => { throw new Error('db down') } })
  // Fastify gives a route the error handler set before it is declared.
  app.setErrorHandler((error, _request, reply) => reply.code(502).send({ mine: true, message: (error as Error).message }))
  app.get('/api/events', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
  const port = await listen(app)
  t.teardown(() => app.close())
  const res = await connect(port)
  await res.ended
  t.equal(res.status, 502)
  t.same(JSON.parse(res.body), { mine: true, message: 'db down' })
  t.equal(app.sse.stats().failedOpens, 1)
})

t.test('a bad ?topics= (400) or a forbidden one (403) is the client\'s, not counted as a failed opening', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { topicsFromRequest: topicsFromQuery({ allow: (topic) => topic.startsWith('public:') }) })
  t.teardown(() => app.close())
  const bad = await app.inject({ url: '/api/events?topics=a%0Ab' })
  t.equal(bad.statusCode, 400)
  t.equal(bad.json().code, 'TOWER_SSE_BAD_TOPIC')
  const forbidden = await app.inject({ url: '/api/events?topics=public:news,user:bob' })
  t.equal(forbidden.statusCode, 403)
  t.match(forbidden.json(), { code: 'TOWER_SSE_TOPIC_FORBIDDEN', message: 'tower-sse: topic "user:bob" is not one this client may subscribe to' })
  t.equal(app.sse.stats().failedOpens, 0)
  t.equal(app.sse.stats().accepted, 0)
})

/** A gate an async hook waits on: the test decides when the hook (an auth lookup, say) returns. */
function gate (): { wait: () => Promise<void>, open: () => void, waiting: () => number } {
  let release: () => void = () => {}
  const opened = new Promise<void>((resolve) => { release = resolve })
  let waiting = 0
  return {
    wait: async () => {
      waiting++
      await opened
    },
    open: () => release(),
    waiting: () => waiting
  }
}

t.test('ghost slots: clients that leave while an async hook runs take no slot; a real client is then admitted at capacity 1', async (t) => {
  const hook = gate()
  let handled = 0
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, maxClients: 1, heartbeatMs: 60_000 })
  app.get('/slow', { eventStream: true, preHandler: async () => hook.wait() }, async (_request, reply) => {
    try {
      await reply.eventStream.subscribe()
    } finally {
      handled++
    }
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const ghosts = Array.from({ length: 5 }, () => rawExchange(port, 'GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n'))
  await waitFor('every ghost in the hook', () => hook.waiting() === 5)
  for (const ghost of ghosts) ghost.socket.destroy()
  await waitFor('the server to see them go', () => ghosts.every((g) => g.isClosed()))
  await new Promise<void>((resolve) => app.server.getConnections((_error, count) => count === 0 ? resolve() : setTimeout(resolve, 50)))
  hook.open()
  await waitFor('every ghost\'s handler to finish', () => handled === 5)
  t.same([app.sse.stats().current, app.sse.stats().accepted, app.sse.stats().rejected], [0, 0, 0], 'no slot taken, none refused')
  const real = await connect(port, '/slow')
  t.equal(real.status, 200, 'the one slot is free')
  t.equal(app.sse.size, 1)
  real.destroy()
})

t.test('headers set by the app reach the stream, the HEAD answer and the 503 refusal; the stream\'s own win where they must', async (t) => {
  const app = Fastify({ logger: false })
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
    reply.header('set-cookie', 'seen=1; Path=/; HttpOnly')
    reply.header('content-type', 'text/plain')
    reply.header('cache-control', 'public, max-age=60')
  })
  await app.register(towerSse, { path: false, maxClients: 1, heartbeatMs: 60_000 })
  app.get('/events', { eventStream: true }, (_request, reply) => {
    reply.header('x-from-handler', 'yes')
    reply.header('content-length', '12')
    return reply.eventStream.subscribe()
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const stream = await connect(port, '/events')
  t.equal(stream.status, 200)
  t.match(stream.headers, {
    'x-request-id': /\w/,
    'set-cookie': ['seen=1; Path=/; HttpOnly'],
    'x-from-handler': 'yes',
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'close'
  })
  t.equal(stream.headers['content-length'], undefined, 'no length: the body runs until the server closes')
  const refused = await connect(port, '/events')
  t.equal(refused.status, 503)
  t.match(refused.headers, { 'x-request-id': /\w/, 'set-cookie': ['seen=1; Path=/; HttpOnly'], 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', 'retry-after': /^\d+$/ })
  const head = rawExchange(port, 'HEAD /events HTTP/1.1\r\nHost: localhost\r\n\r\n')
  await waitFor('the HEAD answer and close', head.isClosed)
  t.match(head.text(), /^HTTP\/1\.1 200 OK\r\n/)
  t.match(head.text(), /\r\nset-cookie: seen=1; Path=\/; HttpOnly\r\n[\s\S]*\r\nx-from-handler: yes\r\n/i)
  stream.destroy()
})

t.test('sseOf(fastify): the hub where tower-sse is registered and below; TOWER_SSE_NOT_REGISTERED elsewhere', async (t) => {
  const app = Fastify({ logger: false })
  let scoped: unknown
  let below: unknown
  await app.register(async (scope) => {
    await scope.register(towerSse, { path: '/events' })
    scoped = sseOf(scope)
    await scope.register(async (child) => { below = sseOf(child) })
  })
  t.teardown(() => app.close())
  t.ok(scoped !== undefined && below === scoped, 'the scope and a context below share its hub')
  t.throws(() => sseOf(app), { code: 'TOWER_SSE_NOT_REGISTERED', message: /not registered in this context or above/ })
})
