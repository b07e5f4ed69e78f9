// docs/migrating-from-fastify-sse.md: @fastify/sse's README examples ported to tower-sse run on a
// real socket, and each promise of the page's table that is not a rename holds — numeric ids, a
// per-event retry, the app's status code (200–203), strings as they are and objects as JSON (where
// @fastify/sse sends a string as JSON), a Last-Event-ID resumed by the bus, and a route's onResponse
// hooks run exactly once when the client leaves and when the server ends the stream.
import type { AddressInfo } from 'node:net'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifySse from '@fastify/sse'
import towerSse, { type StreamEnd } from '../lib'
import { connect, waitFor } from './fixtures/sse-connection'

async function listen (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

/** Lets every listener of events already emitted run (a hook that would run twice has then run twice). */
async function settle (): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve))
}

t.test('@fastify/sse\'s quick start, ported: the handle sends a string as is, an object as JSON, id and retry; end() closes', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  app.get('/events', { eventStream: true }, async (_request, reply) => {
    const stream = await reply.eventStream.subscribe()
    stream.send({ data: 'Hello SSE!' })
    stream.send({ id: '123', event: 'update', data: { message: 'Hello World' }, retry: 1000 })
    stream.end()
  })
  const port = await listen(app)
  t.teardown(() => app.close())

  const client = await connect(port, '/events')
  await client.ended
  t.equal(client.status, 200)
  t.same(client.events.map((e) => [e.event, e.id, e.data]), [
    [undefined, undefined, 'Hello SSE!'],
    ['update', '123', '{"message":"Hello World"}'],
    ['end', undefined, '{}']
  ], 'a string as it is, an object as JSON; then `event: end`')
  t.match(client.body, /\nretry: 1000\nid: 123\nevent: update\n/, 'the per-event retry, on the wire')
  t.equal(client.retries.length, 3, 'the opening retry:, the event\'s, and a fresh one before the server\'s close')
  t.equal(client.retries[1], 1000)
  t.match(app.sse.stats(), { ended: 1, current: 0 })
})

t.test('the same quick start on @fastify/sse itself: its default serializer sends a string as JSON (what the page says once)', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(fastifySse)
  app.get('/events', { sse: true }, async (_request, reply) => {
    await reply.sse.send({ data: 'Hello SSE!' })
  })
  t.teardown(() => app.close())
  const response = await app.inject({ url: '/events', headers: { accept: 'text/event-stream' } })
  t.match(response.body, /^data: "Hello SSE!"$/m, 'quoted: @fastify/sse JSON-encodes strings')
})

t.test('the quick start as an async generator: numeric ids and per-item retry; the generator finishing ends the stream', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  async function * events (): AsyncGenerator<{ data: unknown, id?: number, event?: string, retry?: number }> {
    yield { data: 'Hello SSE!', id: 7 }
    yield { id: 8, event: 'update', data: { message: 'Hello World' }, retry: 1500 }
  }
  app.get('/events', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ stream: events() }))
  const port = await listen(app)
  t.teardown(() => app.close())
  const client = await connect(port, '/events')
  await client.ended
  t.same(client.events.map((e) => [e.id, e.data]), [['7', 'Hello SSE!'], ['8', '{"message":"Hello World"}'], [undefined, '{}']])
  t.match(client.body, /\nid: 7\ndata: Hello SSE!\n\nretry: 1500\nid: 8\n/, '`{ id: 7 }` → `id: 7`, `{ retry: 1500 }` → `retry: 1500`')
})

t.test('@fastify/sse\'s connection-management example, ported: isOpen, onClose and signal when the client leaves', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  const closed: StreamEnd[] = []
  const aborted: unknown[] = []
  let pings = 0
  let cleared = false
  app.get('/live', { eventStream: true }, async (_request, reply) => {
    const stream = await reply.eventStream.subscribe({ initialEvent: { data: 'Connected' } })
    const interval = setInterval(() => {
      if (stream.isOpen) {
        pings++
        stream.send({ data: 'ping' })
      } else {
        clearInterval(interval)
      }
    }, 20)
    stream.onClose((reason) => {
      closed.push(reason)
      clearInterval(interval)
      cleared = !stream.isOpen
    })
    stream.signal.addEventListener('abort', () => aborted.push(stream.signal.reason))
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const client = await connect(port, '/live')
  t.equal((await client.nextEvent(0)).data, 'Connected')
  t.same([(await client.nextEvent(1)).data, (await client.nextEvent(2)).data], ['ping', 'ping'])
  client.destroy()
  await waitFor('the stream to close', () => closed.length === 1)
  await settle()
  t.same(closed, ['disconnected'], 'onClose, once, with how it ended')
  t.same(aborted, ['disconnected'], 'the signal aborted with the same reason')
  t.equal(cleared, true, 'isOpen is false by then')
  const sent = pings
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.equal(pings, sent, 'the interval was cleared: no ping after the close')
})

t.test('reply.code() before subscribe() is the stream\'s status when it is 200–203; any other opens with 200', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  app.get<{ Querystring: { code: string } }>('/created', { eventStream: true }, (request, reply) => {
    reply.code(Number(request.query.code))
    return reply.eventStream.subscribe({ initialEvent: { data: 'created' } })
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  for (const [asked, status] of [[200, 200], [201, 201], [202, 202], [203, 203], [204, 200], [206, 200], [299, 200]]) {
    const client = await connect(port, `/created?code=${asked}`)
    t.equal(client.status, status, `reply.code(${asked}) → ${status}`)
    t.equal(client.headers['content-type'], 'text/event-stream; charset=utf-8')
    t.equal((await client.nextEvent(0)).data, 'created', 'and a stream it is')
    client.destroy()
  }
})

t.test('lastEventId and replay: a client reconnecting with Last-Event-ID gets the broadcasts it missed, from the bus\'s history', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  app.get('/events', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
  const port = await listen(app)
  t.teardown(() => app.close())
  const first = await connect(port, '/events')
  await app.sse.broadcast('one')
  const seen = await first.nextEvent(0)
  first.destroy()
  await waitFor('the first stream to close', () => app.sse.size === 0)
  await app.sse.broadcast('two')
  await app.sse.broadcast({ n: 3 })
  const again = await connect(port, '/events', { 'last-event-id': seen.id as string })
  t.same([(await again.nextEvent(0)).data, (await again.nextEvent(1)).data], ['two', '{"n":3}'], 'replayed, in order, no handler code')
  t.equal(app.sse.stats().resumes.replayed, 1)
  again.destroy()
})

t.test('onResponse-based plugins see a stream: a route\'s onResponse hooks run exactly once when the client leaves, and once when the server ends it', async (t) => {
  const app = Fastify({ logger: false })
  const calls: Array<{ url: string, status: number }> = []
  app.addHook('onResponse', (request, reply, done) => {
    calls.push({ url: request.url, status: reply.statusCode })
    done()
  })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  const rawClosed: string[] = []
  app.get<{ Querystring: { end?: string } }>('/events', { eventStream: true }, async (request, reply) => {
    reply.raw.once('close', () => rawClosed.push(request.url))
    const stream = await reply.eventStream.subscribe({ initialEvent: { data: 'hi' } })
    if (request.query.end === '1') setImmediate(() => stream.end())
  })
  app.get('/plain', async () => 'plain')
  const port = await listen(app)
  t.teardown(() => app.close())

  const leaving = await connect(port, '/events')
  await leaving.nextEvent(0)
  t.same(calls, [], 'not while the stream is open')
  leaving.destroy()
  await waitFor('the response to close', () => rawClosed.length === 1)
  await settle()
  t.same(calls.filter((c) => c.url === '/events'), [{ url: '/events', status: 200 }], 'the client left: exactly one call')

  const ended = await connect(port, '/events?end=1')
  await ended.ended
  t.same(ended.events.map((e) => e.event), [undefined, 'end'])
  await waitFor('the response to close', () => rawClosed.length === 2)
  await settle()
  t.same(calls.filter((c) => c.url === '/events?end=1'), [{ url: '/events?end=1', status: 200 }], 'the server ended it (handle.end()): exactly one call, never two')

  const plain = await connect(port, '/plain')
  await plain.ended
  await waitFor('the plain route\'s onResponse', () => calls.some((c) => c.url === '/plain'))
  t.same(calls.map((c) => c.url), ['/events', '/events?end=1', '/plain'], 'the hook counts a finite route as Fastify always does, and nothing else ran it')
})
