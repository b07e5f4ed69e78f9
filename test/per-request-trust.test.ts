import t, { type Test } from 'tap'
import { Readable } from 'node:stream'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import towerSse, { keyFromClientId, type StreamHandle, type SubscribeOptions, type TowerSseOptions } from '../lib'
import { withTestClocks } from '../lib/testing'
import { connect, rawStream, waitFor } from './fixtures/sse-connection'

// What an app's per-request stream may do, hostile or careless, and what the plugin guarantees
// anyway: no crash, no hang, no leak, no silent drop; a handle for the connection.

interface Logged { level: number, msg?: string, err?: { message?: string }, streamId?: string }

async function start (t: Test, options: TowerSseOptions, routes: (app: FastifyInstance) => void): Promise<{ app: FastifyInstance, port: number, logged: Logged[] }> {
  const logged: Logged[] = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { logged.push(JSON.parse(line)) } } } })
  await app.register(towerSse, withTestClocks({ heartbeatMs: 60_000, retryMs: 2000, path: false, ...options }, { random: () => 0.5 }))
  routes(app)
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { app, port: (app.server.address() as AddressInfo).port, logged }
}

function route (app: FastifyInstance, subscribe: () => SubscribeOptions): void {
  app.get('/s', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe(subscribe()))
}

t.test('an iterator whose return() throws, or never settles: the client leaving, close({ key }) and app.close() all go on', async (t) => {
  const returned: string[] = []
  const hostile = (kind: 'throws' | 'rejects' | 'hangs'): AsyncIterable<{ data: string }> => ({
    [Symbol.asyncIterator]: () => ({
      next: async () => new Promise(() => {}),
      return: () => {
        returned.push(kind)
        if (kind === 'throws') throw new Error('return() threw synchronously')
        if (kind === 'rejects') return Promise.reject(new Error('return() rejected'))
        return new Promise(() => {})
      }
    })
  })
  const kinds = ['throws', 'rejects', 'hangs'] as const
  let n = 0
  const { app, port, logged } = await start(t, { keyFn: () => 'user' }, (app) => route(app, () => ({ stream: hostile(kinds[n++ % 3]) })))
  const left = await connect(port, '/s')
  const closedByKey = [await connect(port, '/s'), await connect(port, '/s')]
  await waitFor('3 streams', () => app.sse.size === 3)
  left.destroy()
  await waitFor('the one that left to be gone', () => app.sse.size === 2)
  t.equal(app.sse.close({ key: 'user' }, 'revoked'), 2, 'close({ key }) ends the others and throws nothing of the app\'s')
  await Promise.all(closedByKey.map((c) => c.ended))
  t.same(returned.sort(), ['hangs', 'rejects', 'throws'], 'every iterator was returned')
  t.ok(logged.some((l) => l.msg?.includes('threw; ignored') === true && l.err?.message === 'return() threw synchronously'), 'the throw is logged')
  await app.close()
  t.pass('app.close() resolved with a return() that never settles')
})

t.test('a stream that is no async iterable is a 500 before anything opens; an iterator that cannot be had ends its stream, told', async (t) => {
  const streams: Array<() => unknown> = [
    () => 42,
    () => ({ [Symbol.asyncIterator]: () => { throw new Error('cursor could not open') } })
  ]
  let n = 0
  const { app, port, logged } = await start(t, {}, (app) => route(app, () => ({ stream: streams[n++]() as never })))
  const notIterable = await connect(port, '/s')
  await notIterable.ended
  t.equal(notIterable.status, 500)
  t.match(JSON.parse(notIterable.body), { code: 'TOWER_SSE_BAD_STREAM', message: /must be an async iterable .* got number/ })
  const lazy = await connect(port, '/s')
  await lazy.ended
  t.same([lazy.status, lazy.events.map((e) => [e.event, e.data]), lazy.retries], [200, [['error', '{"code":"TOWER_SSE_STREAM_FAILED"}']], [2000, 2000]])
  t.match(app.sse.stats(), { failedOpens: 1, streamFailed: 1, current: 0 })
  t.equal(logged.filter((l) => l.msg?.includes('per-request stream failed') === true && l.err?.message === 'cursor could not open').length, 1, 'logged once, with the stream id')
})

t.test('broadcasts to a per-request stream whose reader keeps up never drop it: the pump leaves half the budget free', async (t) => {
  const budget = 256 * 1024
  let pulled = 0
  const { app, port } = await start(t, { maxBufferedBytes: budget }, (app) => route(app, () => ({
    // 500-byte items: the socket's buffers (megabytes on loopback) fill in thousands of pulls, not
    // a hundred thousand a loaded machine takes tens of seconds over.
    stream: (async function * () { for (;;) { pulled++; yield { data: 'x'.repeat(500) } } })()
  })))
  const reader = rawStream(port, '/s')
  t.teardown(() => reader.socket.destroy())
  reader.socket.pause()
  let stalledAt = -1
  await waitFor('the pump to stop pulling', () => {
    const stalled = pulled === stalledAt
    stalledAt = pulled
    return stalled && pulled > 100
  }, 30_000)
  for (let i = 0; i < 20; i++) t.equal((await app.sse.broadcast('b'.repeat(200))).delivered, 1, `broadcast ${i} queued`)
  t.equal(app.sse.stats().dropped, 0, 'the stream was not dropped as slow')
  reader.socket.resume()
  await waitFor('the reader to take what was queued and the pump to go on', () => pulled > stalledAt + 1000)
  t.equal(app.sse.stats().dropped, 0)
})

t.test('an always-ready iterable lets the event loop turn while it fills its budget: a timer set as it starts fires before it ends', async (t) => {
  const TOTAL = 3000
  let pulled = 0
  let pulledWhenTimerFired = -1
  const { port } = await start(t, {}, (app) => route(app, () => ({
    stream: (async function * () {
      setImmediate(() => { pulledWhenTimerFired = pulled })
      for (; pulled < TOTAL; pulled++) yield { data: `row ${pulled}` }
    })()
  })))
  const reader = await connect(port, '/s')
  await reader.ended
  t.equal(reader.events.filter((e) => e.event === undefined).length, TOTAL, 'every event delivered, then the end')
  t.ok(pulledWhenTimerFired >= 0 && pulledWhenTimerFired < TOTAL, `the loop turned with ${pulledWhenTimerFired} of ${TOTAL} pulled`)
})

t.test('an item that can never fit the budget: logged, told as `event: error`, closed with a retry: — not dropped as a slow client', async (t) => {
  // `data: <4088 bytes>\n\n`: a frame of exactly the budget fits it (once nothing else is unsent).
  const exact = 'e'.repeat(4096 - 'data: \n\n'.length)
  const { app, port, logged } = await start(t, { maxBufferedBytes: 4096 }, (app) => route(app, () => ({
    stream: (async function * () { yield { data: 'small' }; yield { data: exact }; yield { data: 'x'.repeat(8192) } })()
  })))
  const c = await connect(port, '/s')
  await c.ended
  t.same(c.events.map((e) => [e.event, e.data]), [[undefined, 'small'], [undefined, exact], ['error', '{"code":"TOWER_SSE_ITEM_TOO_LARGE"}']])
  t.same(c.retries, [2000, 2000])
  t.match(app.sse.stats(), { streamFailed: 1, dropped: 0 })
  t.ok(logged.some((l) => /TOWER_SSE_ITEM_TOO_LARGE/.test(l.msg ?? '') && /8\d{3} bytes can never fit .* 4096-byte budget/.test(l.err?.message ?? '')), 'the log says which item and which budget')
})

t.test('an iterable whose stream never opens is released: per-key 429, a late 503, HEAD, a client gone during the hooks, a failed opening, a Readable destroyed', async (t) => {
  const released: string[] = []
  const tracked = (name: string): AsyncIterable<{ data: string }> => ({
    [Symbol.asyncIterator]: () => ({
      next: async () => { released.push(`${name} started`); return { done: true, value: undefined } },
      return: async () => { released.push(name); return { done: true, value: undefined } }
    })
  })
  let gate: (() => void) | null = null
  const keyFn = (request: { headers: Record<string, unknown> }): string => {
    if (request.headers['x-user'] === 'nobody') throw new Error('no key for this request')
    return String(request.headers['x-user'])
  }
  const { app, port } = await start(t, { maxClients: 2, maxClientsPerKey: 1, keyFn, storm: false }, (app) => {
    app.route({
      method: ['GET', 'HEAD'],
      url: '/s',
      eventStream: true,
      preHandler: async (request) => {
        if (request.headers['x-wait'] !== undefined) await new Promise<void>((resolve) => { gate = resolve })
      },
      handler: (request, reply) => {
        const name = String(request.headers['x-name'])
        const stream = name.endsWith('readable') ? readable(name) : tracked(name)
        return reply.eventStream.subscribe({ stream, keepOpen: true })
      }
    })
  })
  const readable = (name: string): Readable => {
    const r = Readable.from((async function * () { yield { data: 'never' } })())
    r.once('close', () => released.push(name))
    return r
  }
  const holder = await connect(port, '/s', { 'x-user': 'a', 'x-name': 'holder' })
  const perKey = await connect(port, '/s', { 'x-user': 'a', 'x-name': 'perKey' })
  await perKey.ended
  t.equal(perKey.status, 429)
  const head = await new Promise<number>((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/s', method: 'HEAD', headers: { 'x-user': 'h', 'x-name': 'head' } }, (res) => { res.resume(); resolve(res.statusCode ?? 0) })
    req.end()
  })
  t.equal(head, 200)
  // A Readable that never opened is destroyed: returning an iterator of it never started would do nothing to it.
  const headReadable = await new Promise<number>((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/s', method: 'HEAD', headers: { 'x-user': 'h', 'x-name': 'head-readable' } }, (res) => { res.resume(); resolve(res.statusCode ?? 0) })
    req.end()
  })
  t.equal(headReadable, 200)
  const failed = await connect(port, '/s', { 'x-user': 'nobody', 'x-name': 'failed' })
  await failed.ended
  t.equal(failed.status, 500, 'an opening that failed (its key hook threw)')
  // Past onRequest while there is room; by its turn to open, the room is gone: a late 503.
  const late = connect(port, '/s', { 'x-user': 'b', 'x-name': 'late', 'x-wait': '1' })
  await waitFor('the late one to wait in its hook', () => gate !== null)
  const filler = await connect(port, '/s', { 'x-user': 'c', 'x-name': 'readable' })
  t.equal(filler.status, 200)
  const openGate = gate as unknown as () => void
  gate = null
  openGate()
  const lateConn = await late
  await lateConn.ended
  t.equal(lateConn.status, 503)
  // Gone while its hook ran.
  filler.destroy()
  await waitFor('room again', () => app.sse.size === 1)
  const gone = http.get({ host: '127.0.0.1', port, path: '/s', agent: false, headers: { 'x-user': 'd', 'x-name': 'gone', 'x-wait': '1' } })
  gone.once('error', () => {})
  await waitFor('the gone one to wait in its hook', () => gate !== null)
  gone.destroy()
  await new Promise((resolve) => setTimeout(resolve, 50))
  ;(gate as unknown as () => void)()
  await waitFor('every iterable released', () => ['perKey', 'head', 'head-readable', 'failed', 'late', 'gone', 'readable'].every((name) => released.includes(name)))
  t.same(released.filter((r) => r.endsWith('started')), ['holder started', 'readable started'].filter((r) => released.includes(r)), 'only the opened streams were pulled')
  t.notOk(released.some((r) => ['perKey', 'head', 'failed', 'late', 'gone'].some((name) => r === `${name} started`)), 'no released iterable was ever started')
  holder.destroy()
})

t.test('a Last-Event-ID the bus never issued resyncs, never a fresh stream: a broadcast meanwhile is not lost silently', async (t) => {
  const { app, port } = await start(t, { path: '/events' }, () => {})
  for (const id of ['log:7', 'line-7', '7', 'x'.repeat(300)]) {
    const c = await connect(port, '/events', { 'last-event-id': id })
    const first = await c.nextEvent(0)
    t.same([first.event, JSON.parse(first.data).reason], ['resync', 'unknown'], JSON.stringify(id.slice(0, 12)))
    c.destroy()
  }
  t.match(app.sse.stats().resumes, { resync: 4, fresh: 0 })
})

t.test('the handle: id, send, onClose, signal; end() ends the stream as complete', async (t) => {
  let handle!: StreamHandle
  const { app, port } = await start(t, {}, (app) => {
    app.get('/s', { eventStream: true }, async (_request, reply) => {
      handle = await reply.eventStream.subscribe()
      return handle
    })
  })
  const c = await connect(port, '/s')
  await waitFor('the handle', () => handle !== undefined)
  t.same([handle.opened, handle.isOpen, handle.signal.aborted], [true, true, false])
  t.same([...app.sse].map((s) => s.id), [handle.id], 'the id app.sse knows')
  const closes: string[] = []
  handle.onClose((reason) => closes.push(reason))
  t.equal(handle.send({ event: 'note', data: { n: 1 }, id: 5 }), true)
  t.throws(() => handle.send({ data: 1, event: 'a\nb' }), { code: 'TOWER_SSE_BAD_FIELD' })
  await waitFor('the note', () => c.events.length === 1)
  handle.end()
  await c.ended
  t.same(c.events.map((e) => [e.event, e.data, e.id]), [['note', '{"n":1}', '5'], ['end', '{}', undefined]])
  t.same([closes, handle.isOpen, handle.signal.aborted, handle.signal.reason], [['ended'], false, true, 'ended'])
  t.equal(handle.send({ data: 'late' }), false, 'nothing is written after the end')
  t.equal(app.sse.stats().ended, 1)
})

t.test('a factory gets the stream\'s signal, aborted when the client leaves; a stream refused when it opens has a handle closed at once', async (t) => {
  let signal: AbortSignal | undefined
  const handles: StreamHandle[] = []
  // The per-key limit is checked when the handler subscribes (the key is known then): the handler gets a handle.
  const { app, port } = await start(t, { maxClientsPerKey: 1, keyFn: () => 'k', storm: false }, (app) => {
    app.get('/s', { eventStream: true }, async (_request, reply) => {
      const handle = await reply.eventStream.subscribe({ stream: (context) => { signal = context.signal; return (async function * () { yield { data: context.id } })() }, keepOpen: true })
      handles.push(handle)
      return handle
    })
  })
  const c = await connect(port, '/s')
  await waitFor('its event', () => c.events.length === 1)
  t.equal(c.events[0].data, handles[0].id)
  const refused = await connect(port, '/s')
  await refused.ended
  await waitFor('both handles', () => handles.length === 2)
  t.same([refused.status, handles[1].opened, handles[1].signal.aborted, handles[1].signal.reason], [429, false, true, 'notOpened'])
  c.destroy()
  await waitFor('the signal', () => signal?.aborted === true)
  t.equal(signal?.reason, 'disconnected')
  t.equal(app.sse.size, 0)
})

t.test('keyFromClientId: a client elsewhere naming itself like another gets neither its send({ key }) nor its slots', async (t) => {
  const { app, port } = await start(t, { path: '/events', keyFn: keyFromClientId, maxClientsPerKey: 1, storm: false }, () => {})
  const victim = await connect(port, '/events', { 'x-client-id': 'editor' }, { localAddress: '127.0.0.2' })
  const mimic = await connect(port, '/events', { 'x-client-id': 'editor' }, { localAddress: '127.0.0.3' })
  t.same([victim.status, mimic.status], [200, 200], 'the mimic does not use up the victim\'s one slot, nor the victim its')
  const [victimKey] = [...app.sse].map((s) => s.key)
  t.equal(app.sse.send({ key: victimKey }, 'for the editor on 127.0.0.2'), 1)
  await waitFor('the victim\'s event', () => victim.events.length === 1)
  await app.sse.broadcast('everyone')
  await waitFor('the broadcast on both', () => victim.events.length === 2 && mimic.events.length === 1)
  t.same(mimic.events.map((e) => e.data), ['everyone'], 'the mimic got only the broadcast')
  const again = await connect(port, '/events', { 'x-client-id': 'editor' }, { localAddress: '127.0.0.2' })
  await again.ended
  t.equal(again.status, 429, 'the per-key limit still holds for the victim\'s own address')
  victim.destroy(); mimic.destroy()
})

t.test('tower-sse\'s own event names (`end`, `refused`) are refused on every path an app writes by: nothing of it is sent', async (t) => {
  let handle!: StreamHandle
  const { app, port } = await start(t, {}, (app) => {
    app.get('/handle', { eventStream: true }, async (_request, reply) => {
      handle = await reply.eventStream.subscribe()
      return handle
    })
    app.get('/item', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
      stream: (async function * () { yield { data: 'first' }; yield { event: 'end', data: 'forged' } })()
    }))
    app.post('/answer', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
      resumable: true,
      stream: (async function * () { yield { data: 'first' }; yield { event: 'refused', data: 'forged' } })()
    }))
    app.get('/initial', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ initialEvent: { event: 'end', data: 'forged' } }))
  })
  const viaHandle = await connect(port, '/handle')
  await waitFor('the handle', () => handle !== undefined)
  for (const name of ['end', 'refused']) {
    await t.rejects(app.sse.broadcast('x', { event: name }), { code: 'TOWER_SSE_BAD_FIELD', message: new RegExp(`"${name}"`) }, `broadcast ${name}`)
    t.throws(() => app.sse.send({ id: handle.id }, 'x', { event: name }), { code: 'TOWER_SSE_BAD_FIELD' }, `app.sse.send ${name}`)
    t.throws(() => handle.send({ event: name, data: 'x' }), { code: 'TOWER_SSE_BAD_FIELD' }, `handle.send ${name}`)
  }
  t.equal((await app.sse.broadcast('fine', { event: 'resync-soon' })).delivered, 1, 'any other name goes')
  await waitFor('the allowed one', () => viaHandle.events.length === 1)
  t.same(viaHandle.events.map((e) => e.event), ['resync-soon'], 'none of the refused ones reached the client')

  const item = await connect(port, '/item')
  await item.ended
  t.same(item.events.map((e) => [e.event, e.data]), [[undefined, 'first'], ['error', '{"code":"TOWER_SSE_STREAM_FAILED"}']], 'an item named `end`: the stream fails, told')
  const answer = await connect(port, '/answer', {}, { method: 'POST', body: '' })
  await answer.ended
  t.same(answer.events.map((e) => [e.event, e.data]), [[undefined, 'first'], ['error', '{"code":"TOWER_SSE_STREAM_FAILED"}']], 'a resumable item named `refused`: the answer fails, told')
  const initial = await connect(port, '/initial')
  await initial.ended
  t.equal(initial.status, 500, 'an initialEvent named `end`: refused before any stream header')
  t.equal(JSON.parse(initial.body).code, 'TOWER_SSE_BAD_FIELD')
})
