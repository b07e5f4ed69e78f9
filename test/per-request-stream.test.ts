import t from 'tap'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyRequest } from 'fastify'
import towerSse, { type SubscribeOptions, type TowerSseOptions } from '../lib'
import { withTestClocks } from '../lib/testing'
import { connect, rawStream, waitFor } from './fixtures/sse-connection'
import type { PerRequestStream } from '../lib/route/per-request'

// subscribe({ stream }) sends one request's own events to its connection only, pulled under half
// its byte budget, stopped (return()) when the stream ends, ended with `event: end` when it finishes
// (or kept open), closed and counted when it fails.

const logged: Array<{ msg?: string, err?: { message?: string } }> = []

async function appWith (make: (request: FastifyRequest) => PerRequestStream, options: TowerSseOptions = {}, subscribe: SubscribeOptions = {}) {
  const app = Fastify({ logger: { level: 'error', stream: { write: (line: string) => { logged.push(JSON.parse(line)) } } } })
  await app.register(towerSse, withTestClocks({ heartbeatMs: 60_000, ...options }, { random: () => 0.5 }))
  app.get('/tokens', { eventStream: true }, (request, reply) => reply.eventStream.subscribe({ ...subscribe, stream: make(request) }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, port: (app.server.address() as AddressInfo).port }
}

t.test('an async generator\'s tokens reach only its own connection; when it finishes, `event: end` and the server closes', async (t) => {
  const { app, port } = await appWith(async function * () {
    for (const token of ['Hel', 'lo', '!']) yield { data: token, event: 'token' }
  }, { retryMs: 2000 })
  t.teardown(() => app.close())
  const other = await connect(port)
  const own = await connect(port, '/tokens')
  await own.ended
  t.same(own.events.map((e) => [e.event, e.data, e.id]), [['token', 'Hel', undefined], ['token', 'lo', undefined], ['token', '!', undefined], ['end', '{}', undefined]])
  t.same(own.retries, [2000, 2000], 'the opening retry: and a fresh one before the close')
  t.match(app.sse.stats(), { ended: 1, current: 1 }, 'counted as ended: a complete answer, not a failure')
  await app.sse.broadcast('after')
  await waitFor('the broadcast', () => other.events.length === 1)
  t.same(other.events.map((e) => e.data), ['after'], 'the other stream got no token')
  other.destroy()
})

t.test('keepOpen: the stream stays open for broadcasts once its own events are done', async (t) => {
  const { app, port } = await appWith(async function * () { yield { data: 1, id: 7, retry: 1500 } }, {}, { keepOpen: true })
  t.teardown(() => app.close())
  const own = await connect(port, '/tokens')
  await waitFor('its event', () => own.events.length === 1)
  t.same([own.events[0].id, own.events[0].data, own.retries.at(-1)], ['7', '1', 1500], 'a numeric id, and a per-item retry:')
  await app.sse.broadcast('after')
  await waitFor('the broadcast', () => own.events.length === 2)
  t.equal(own.isEnded(), false)
  own.destroy()
})

t.test('the stream\'s end returns its iterator in the same turn, however it ends: its client leaving, close(), shutdown', async (t) => {
  const returned: string[] = []
  const { app, port } = await appWith((request) => {
    const name = String(request.headers['x-name'])
    return {
      [Symbol.asyncIterator]: () => ({
        // Never yields: the app's source waits on something that never comes.
        next: async () => await new Promise<IteratorResult<{ data: string }>>(() => {}),
        return: async () => {
          returned.push(name)
          return { done: true, value: undefined }
        }
      })
    }
  }, { keyFn: (request) => String(request.headers['x-name']) })
  const left = await connect(port, '/tokens', { 'x-name': 'left' })
  const closed = await connect(port, '/tokens', { 'x-name': 'closed' })
  const last = await connect(port, '/tokens', { 'x-name': 'last' })
  await waitFor('3 streams', () => app.sse.size === 3)
  left.destroy()
  await waitFor('the one that left to be gone', () => app.sse.size === 2)
  t.same(returned, ['left'], 'returned as its client\'s leaving was seen')
  t.equal(app.sse.close({ key: 'closed' }, 'revoked'), 1)
  t.same(returned, ['left', 'closed'], 'returned as close() ended it')
  await Promise.all([app.close(), closed.ended, last.ended])
  t.same(returned, ['left', 'closed', 'last'], 'returned as shutdown ended it')
})

t.test('the client leaving mid-way runs the generator\'s finally', async (t) => {
  let ran = false
  const finished = (): void => { ran = true }
  let pulled = 0
  const { app, port } = await appWith(async function * () {
    try {
      for (;;) {
        pulled++
        yield { data: pulled }
        await new Promise((resolve) => setImmediate(resolve))
      }
    } finally { finished() }
  })
  t.teardown(() => app.close())
  const own = await connect(port, '/tokens')
  await waitFor('some tokens', () => own.events.length >= 3)
  own.destroy()
  await waitFor('the generator\'s finally', () => ran)
  t.pass(`finally ran after ${pulled} items`)
})

t.test('shutdown runs the generator\'s finally too', async (t) => {
  let ran = false
  const finished = (): void => { ran = true }
  const { app, port } = await appWith(async function * () {
    try {
      for (let n = 0; ; n++) { yield { data: n }; await new Promise((resolve) => setImmediate(resolve)) }
    } finally { finished() }
  })
  const own = await connect(port, '/tokens')
  await waitFor('one token', () => own.events.length >= 1)
  await Promise.all([app.close(), own.ended])
  await waitFor('the generator\'s finally', () => ran)
  t.equal(app.sse.stats().shutdown, 1)
})

t.test('a reader that does not read: the generator is never pulled past the budget, and nothing is dropped', async (t) => {
  const budget = 256 * 1024
  const item = 'x'.repeat(64 * 1024)
  const total = 400 // 25 MB: more than loopback's socket buffers hold
  let pulled = 0
  let serverSocket: { writableNeedDrain: boolean, writableLength: number } | undefined
  let maxUnsent = 0
  const { app, port } = await appWith((request) => (async function * () {
    serverSocket = request.raw.socket
    for (; pulled < total;) {
      maxUnsent = Math.max(maxUnsent, request.raw.socket.writableLength)
      pulled++
      yield { data: item }
    }
  })(), { maxBufferedBytes: budget })
  t.teardown(() => app.close())
  const slow = rawStream(port, '/tokens')
  slow.socket.pause()
  await waitFor('the transport to be backpressured', () => serverSocket?.writableNeedDrain === true && pulled > 0, 10_000)
  const stalledAt = pulled
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve))
  t.equal(pulled, stalledAt, `not pulled while backpressured (${pulled} of ${total})`)
  t.ok(pulled < total)
  slow.socket.resume()
  await waitFor('every item read', () => slow.received() >= total * item.length, 15_000)
  t.equal(pulled, total)
  t.ok(maxUnsent <= budget, `unsent bytes at each pull stayed within the budget (max ${maxUnsent})`)
  t.equal(app.sse.stats().dropped, 0)
  slow.socket.destroy()
})

t.test('a throwing iterable is logged, told as `event: error`, its stream closed with a retry:, counted as streamFailed', async (t) => {
  const { app, port } = await appWith(async function * () {
    yield { data: 'first' }
    throw new Error('model went away')
  }, { retryMs: 2000 })
  t.teardown(() => app.close())
  const own = await connect(port, '/tokens')
  await own.ended
  t.same(own.events.map((e) => [e.event, e.data]), [[undefined, 'first'], ['error', '{"code":"TOWER_SSE_STREAM_FAILED"}']], 'the app\'s message is logged, not sent')
  t.same(own.retries, [2000, 2000], 'the opening retry: and one before the close')
  t.equal(app.sse.stats().streamFailed, 1)
  t.match(logged, [{ err: { message: 'model went away' }, msg: /per-request stream failed \(TOWER_SSE_STREAM_FAILED\)/, streamId: String }])
})
