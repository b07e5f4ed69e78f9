// A forgotten `return`: `async (request, reply) => { reply.eventStream.subscribe() }` with any async
// callback lets Fastify answer the handler's undefined before the stream can open. That answer is a
// 500 that names the fix (TOWER_SSE_NOT_RETURNED), logged as a warning, counted as a failed opening;
// the stream never opens, its slot stays free, and a `stream` iterable passed is released. The paths
// that need no `return` (every callback synchronous: the stream opens in the handler's turn; a plain
// function handler) and `await subscribe()` still open their stream. On real sockets.
import { Writable } from 'node:stream'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import towerSse from '../lib'
import type { PerRequestStream } from '../lib/route/per-request'
import { connect, waitFor } from './fixtures/sse-connection'

interface LogLine { level: number, msg: string, err?: { code?: string, message?: string } }

/** Fastify's log lines (warn and above), parsed, as the app's logger writes them. */
function logLines (): { stream: Writable, lines: LogLine[] } {
  const lines: LogLine[] = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line) as LogLine)
      done()
    }
  })
  return { stream, lines }
}

/** A keyFn that reads a store: it settles in a later turn, as a database's answer does. */
async function keyFromStore (request: FastifyRequest): Promise<string> {
  await new Promise((resolve) => setImmediate(resolve))
  return `user:${request.headers['x-user'] as string}`
}

/** An async iterable that counts how often it is asked for an iterator and returned (released). */
function countedSource (): { source: PerRequestStream, pulled: () => number, returned: () => number } {
  let pulled = 0
  let returned = 0
  const source: PerRequestStream = {
    [Symbol.asyncIterator]: () => ({
      next: async () => {
        pulled++
        return { done: false, value: { data: 'never' } }
      },
      return: async () => {
        returned++
        return { done: true, value: undefined }
      }
    })
  }
  return { source, pulled: () => pulled, returned: () => returned }
}

async function listen (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

t.test('no `return` with an async keyFn or initialEvent: a 500 that names the fix, a warning, a failed opening; no stream, the slot free, the iterable released', async (t) => {
  const log = logLines()
  const app = Fastify({ logger: { level: 'warn', stream: log.stream } })
  await app.register(towerSse, { path: false, maxClients: 1, heartbeatMs: 60_000 })
  const sources: Array<ReturnType<typeof countedSource>> = []
  app.get('/async-key', { eventStream: { keyFn: keyFromStore } }, async (_request, reply) => {
    const counted = countedSource()
    sources.push(counted)
    reply.eventStream.subscribe({ stream: counted.source })
  })
  app.get('/async-initial', { eventStream: true }, async (_request, reply) => {
    reply.eventStream.subscribe({ initialEvent: async () => ({ data: 'hello' }) })
  })
  app.get('/returned', { eventStream: { keyFn: keyFromStore } }, (_request, reply) => reply.eventStream.subscribe({ initialEvent: { data: 'open' } }))
  const port = await listen(app)
  t.teardown(() => app.close())

  for (const [route, n] of [['/async-key', 1], ['/async-initial', 2]] as const) {
    const answer = await connect(port, route, { 'x-user': 'alice' })
    await answer.ended
    t.equal(answer.status, 500, `${route}: not an empty 200`)
    t.match(answer.headers['content-type'], /^application\/json/)
    const body = JSON.parse(answer.body) as { code: string, message: string, statusCode: number }
    t.equal(body.code, 'TOWER_SSE_NOT_RETURNED')
    t.equal(body.statusCode, 500)
    t.match(body.message, `GET ${route}`, 'names the route')
    t.match(body.message, 'return reply.eventStream.subscribe(', 'and the fix')
    const warned = log.lines.filter((line) => line.err?.code === 'TOWER_SSE_NOT_RETURNED')
    t.equal(warned.length, n, 'logged once per request')
    t.equal(warned[n - 1].level, 40, 'as a warning')
    t.equal(warned[n - 1].msg, body.message)
    t.equal(app.sse.stats().failedOpens, n, 'counted as a failed opening')
  }
  t.equal(app.sse.size, 0, 'no stream opened')
  t.match(app.sse.stats(), { current: 0, refusals: { capacity: 0, perKey: 0 } })
  await waitFor('the iterable to be released', () => sources[0].returned() === 1)
  t.equal(sources[0].pulled(), 0, 'never pulled')

  const open = await connect(port, '/returned', { 'x-user': 'bob' })
  t.equal(open.status, 200, 'at capacity 1, the slot was free: a route that returns opens')
  t.equal((await open.nextEvent(0)).data, 'open')
  t.same(log.lines.filter((line) => line.level >= 50), [], 'nothing logged as an error')
  open.destroy()
})

t.test('what needs no `return` still opens: every callback synchronous (the stream opens in the handler\'s turn), a plain function handler, and `await subscribe()`', async (t) => {
  const log = logLines()
  const app = Fastify({ logger: { level: 'warn', stream: log.stream } })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  app.get('/sync', { eventStream: true }, async (_request, reply) => {
    reply.eventStream.subscribe({ initialEvent: { data: 'sync' } })
  })
  app.get('/plain-function', { eventStream: { keyFn: keyFromStore } }, (_request, reply) => {
    void reply.eventStream.subscribe({ initialEvent: { data: 'plain' } })
  })
  const handles: boolean[] = []
  app.get('/awaited', { eventStream: { keyFn: keyFromStore } }, async (_request, reply) => {
    const handle = await reply.eventStream.subscribe({ initialEvent: async () => ({ data: 'awaited' }) })
    handles.push(handle.opened)
  })
  const port = await listen(app)
  t.teardown(() => app.close())

  const streams = []
  for (const [route, data] of [['/sync', 'sync'], ['/plain-function', 'plain'], ['/awaited', 'awaited']]) {
    const stream = await connect(port, route, { 'x-user': route })
    t.equal(stream.status, 200, route)
    t.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8')
    t.equal((await stream.nextEvent(0)).data, data)
    streams.push(stream)
  }
  t.same(handles, [true], 'the awaited handle is open')
  t.match(app.sse.stats(), { current: 3, failedOpens: 0 })
  t.same(log.lines, [], 'nothing logged')
  for (const stream of streams) stream.destroy()
})
