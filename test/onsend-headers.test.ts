// Headers that plugins set in their onSend hooks reach a stream and the refusals answered when the
// handler subscribes: a hijacked reply skips onSend, so tower-sse runs the route's onSend hooks itself
// before admission (lib/platform/route-hooks.ts). With the real @fastify/cookie and @fastify/session,
// on real sockets; and @fastify/compress registered globally leaves a stream alone.
//
// Covered: the 200 stream, and a refusal decided when the handler subscribes (per key: 429).
// Not covered: a refusal answered by admission's early check (the route's onRequest: capacity 503,
// pressure, rate, shutdown) runs before the app's preHandler and handler, and before any onSend hook
// could have anything to add: a cookie set with reply.setCookie() in a hook that ran before it is still
// only in @fastify/cookie's pending list, never serialized. Headers set with reply.header() do reach it
// (test/own-route.test.ts, test/app-plugins.test.ts).
import type { AddressInfo } from 'node:net'
import http from 'node:http'
import zlib from 'node:zlib'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import cookie from '@fastify/cookie'
import session from '@fastify/session'
import compress from '@fastify/compress'
import towerSse from '../lib'
import { connect, waitFor } from './fixtures/sse-connection'

declare module 'fastify' {
  interface Session {
    user?: string
  }
}

async function listen (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

/** The `name=value` part of each Set-Cookie header. */
function cookiesOf (headers: http.IncomingHttpHeaders): string[] {
  return (headers['set-cookie'] ?? []).map((line) => line.split(';')[0])
}

/** A plain GET on its own connection, for the app's finite routes. */
function get (port: number, path: string, headers: http.OutgoingHttpHeaders = {}): Promise<{ status: number, headers: http.IncomingHttpHeaders, body: Buffer }> {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path, agent: false, headers }, (response) => {
      const chunks: Buffer[] = []
      response.on('data', (chunk: Buffer) => chunks.push(chunk))
      response.once('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks) }))
    }).once('error', reject)
  })
}

t.test('@fastify/cookie: a cookie set in a preHandler is on the stream, and on the 429 answered when the handler subscribes', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(cookie)
  await app.register(towerSse, { path: false, maxClientsPerKey: 1, keyFn: () => 'one-key', heartbeatMs: 60_000 })
  let visits = 0
  app.get('/events', {
    eventStream: true,
    preHandler: async (_request, reply) => {
      visits++
      reply.setCookie('visit', String(visits), { path: '/', httpOnly: true })
    }
  }, (_request, reply) => reply.eventStream.subscribe({ initialEvent: { data: 'hello' } }))
  const port = await listen(app)
  t.teardown(() => app.close())

  const stream = await connect(port, '/events')
  t.equal(stream.status, 200)
  t.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.same(cookiesOf(stream.headers), ['visit=1'], 'the cookie @fastify/cookie serializes in its onSend hook')
  t.match(stream.headers['set-cookie'], [/^visit=1; Path=\/; HttpOnly(;|$)/], 'with the attributes asked for')
  t.equal((await stream.nextEvent(0)).data, 'hello', 'and the stream works')

  const refused = await connect(port, '/events')
  t.equal(refused.status, 429, 'the same key again: refused when the handler subscribes, after the onSend hooks ran')
  await refused.ended
  t.match(JSON.parse(refused.body), { code: 'TOWER_SSE_PER_KEY' })
  t.same(cookiesOf(refused.headers), ['visit=2'], 'the refusal carries the cookie too')
  t.match(app.sse.stats(), { current: 1, failedOpens: 0, refusals: { perKey: 1 } })
  stream.destroy()
})

t.test('@fastify/session (saveUninitialized: false): a session value set in a preHandler is saved and its cookie reaches the stream and the 429', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(cookie)
  await app.register(session, { secret: 'a secret with minimum length of 32 characters', saveUninitialized: false, cookie: { secure: false } })
  await app.register(towerSse, { path: false, maxClientsPerKey: 1, keyFn: (request) => String((request.query as { user?: string }).user), heartbeatMs: 60_000 })
  app.get<{ Querystring: { user?: string } }>('/events', {
    eventStream: true,
    preHandler: async (request) => { request.session.set('user', request.query.user) }
  }, (_request, reply) => reply.eventStream.subscribe())
  app.get('/plain-events', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
  app.get('/whoami', async (request) => ({ user: request.session.get('user') ?? null }))
  const port = await listen(app)
  t.teardown(() => app.close())

  const stream = await connect(port, '/events?user=alice')
  t.equal(stream.status, 200)
  const [sessionCookie] = cookiesOf(stream.headers)
  t.match(sessionCookie, /^sessionId=[^;]+$/, 'the session cookie, set in @fastify/session\'s onSend hook')
  const whoami = await get(port, '/whoami', { cookie: sessionCookie })
  t.same(JSON.parse(whoami.body.toString()), { user: 'alice' }, 'and the session was saved: another request with that cookie reads it')

  const refused = await connect(port, '/events?user=alice')
  t.equal(refused.status, 429)
  const [refusedCookie] = cookiesOf(refused.headers)
  t.match(refusedCookie, /^sessionId=[^;]+$/, 'the refusal carries its own session cookie')
  t.not(refusedCookie, sessionCookie, 'a new session: this request brought no cookie')
  t.same(JSON.parse((await get(port, '/whoami', { cookie: refusedCookie })).body.toString()), { user: 'alice' })

  const untouched = await connect(port, '/plain-events')
  t.equal(untouched.status, 200)
  t.equal(untouched.headers['set-cookie'], undefined, 'a stream whose session was never touched gets no cookie (saveUninitialized: false)')
  stream.destroy()
  untouched.destroy()
})

for (const [setting, options] of [
  ['its defaults (text/event-stream is not a compressible type to it)', {}],
  ['told to compress every type (its onSend hook then claims a gzip body tower-sse drops)', { customTypes: () => true }]
] as const) {
  t.test(`@fastify/compress registered globally, ${setting}: a stream is neither compressed nor broken; the app's other routes still are`, async (t) => {
    const app = Fastify({ logger: false })
    await app.register(compress, { global: true, threshold: 0, ...options })
    await app.register(towerSse, { heartbeatMs: 60_000, initialEvent: () => ({ data: 'first' }) })
    app.get('/big', async () => ({ text: 'x'.repeat(4096) }))
    const port = await listen(app)
    t.teardown(() => app.close())

    const control = await get(port, '/big', { 'accept-encoding': 'gzip' })
    t.equal(control.headers['content-encoding'], 'gzip', 'compress is active on a finite route')
    t.equal(JSON.parse(zlib.gunzipSync(control.body).toString()).text.length, 4096)

    for (const encoding of ['gzip', 'br', 'gzip, deflate, br']) {
      const stream = await connect(port, '/api/events', { 'accept-encoding': encoding })
      t.equal(stream.status, 200, encoding)
      t.equal(stream.headers['content-encoding'], undefined, `${encoding}: no content-encoding on the stream`)
      t.equal(stream.headers['content-length'], undefined, 'nor a length')
      t.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8')
      t.equal((await stream.nextEvent(0)).data, 'first', 'the first event, as plain text')
      await app.sse.broadcast({ n: 1 })
      t.equal((await stream.nextEvent(1)).data, '{"n":1}', 'a broadcast, as plain text')
      stream.destroy()
      await waitFor('the slot to be free', () => app.sse.size === 0)
    }
  })
}
