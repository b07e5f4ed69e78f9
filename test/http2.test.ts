import { subscriberOn } from './fixtures/streams'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { createParser, type EventSourceMessage } from 'eventsource-parser'
import Fastify from 'fastify'
import towerSse, { type TowerSseOptions } from '../lib'
import { waitFor } from './fixtures/sse-connection'
import type { ServerResponse } from 'node:http'
import { HEARTBEAT_FRAME } from '../lib/events/encoder'
import { resetResponse } from './fixtures/h2-reset-response'

/** tower-sse on Fastify's HTTP/2 server without TLS (h2c), on an ephemeral loopback port. */
async function startH2c (options: TowerSseOptions) {
  const app = Fastify({ http2: true, logger: false })
  await app.register(towerSse, options)
  await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, port: (app.server.address() as AddressInfo).port }
}

interface H2Stream {
  status: () => number | undefined
  headers: () => http2.IncomingHttpHeaders
  events: EventSourceMessage[]
  body: () => string
  isEnded: () => boolean
  /** How the stream ended: 0 for a clean END_STREAM, otherwise the RST_STREAM code. */
  rstCode: () => number | undefined
}

/** One request on a shared HTTP/2 session, its SSE body parsed by eventsource-parser. */
function open (session: http2.ClientHttp2Session, path: string, method = 'GET'): H2Stream {
  const req = session.request({ ':path': path, ':method': method })
  let status: number | undefined
  let headers: http2.IncomingHttpHeaders = {}
  let body = ''
  let ended = false
  const events: EventSourceMessage[] = []
  const parser = createParser({ onEvent: (event) => events.push(event) })
  req.on('response', (h) => {
    headers = h
    status = Number(h[':status'])
  })
  req.setEncoding('utf8')
  req.on('data', (chunk: string) => {
    body += chunk
    parser.feed(chunk)
  })
  req.on('error', () => {})
  req.on('close', () => { ended = true })
  return { status: () => status, headers: () => headers, events, body: () => body, isEnded: () => ended, rstCode: () => ended ? req.rstCode : undefined }
}

t.test('HTTP/2: a refusal and an expiry end only their own stream; the session and the other stream go on, no warning', async (t) => {
  const warnings: Error[] = []
  const onWarning = (warning: Error): void => { warnings.push(warning) }
  process.on('warning', onWarning)
  t.teardown(() => process.off('warning', onWarning))

  // maxClients 1: the second stream is refused. The first expires within [150, 450] ms.
  const { app, port } = await startH2c({ maxClients: 1, maxAgeMs: 300, heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const session = http2.connect(`http://127.0.0.1:${port}`)
  let sessionClosed = false
  session.on('close', () => { sessionClosed = true })
  session.on('error', () => {})
  t.teardown(() => session.close())

  const first = open(session, '/api/events')
  await waitFor('the first stream to open', () => first.status() === 200 && first.body().includes('retry:'))
  t.equal(first.headers()['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(first.headers().connection, undefined, 'no hop-by-hop header on HTTP/2')

  const refused = open(session, '/api/events')
  await waitFor('the refusal to end', refused.isEnded)
  t.equal(refused.status(), 503)
  t.equal(refused.rstCode(), 0, 'the refusal ends its stream cleanly, every byte delivered')
  t.equal(JSON.parse(refused.body()).reason, 'capacity')
  t.equal(refused.headers().connection, undefined)
  t.ok(Number(refused.headers()['retry-after']) >= 1)

  t.equal((await app.sse.broadcast('after the refusal')).delivered, 1)
  await waitFor('the open stream to receive it', () => first.events.length === 1)
  t.equal(first.isEnded(), false, 'the refusal did not end the other stream')

  await waitFor('the first stream to expire', first.isEnded)
  t.equal(first.rstCode(), 0, 'the expiry ends its stream cleanly')
  t.equal(app.sse.stats().expired, 1)
  t.equal(sessionClosed, false, 'the session outlives both endings')

  const again = open(session, '/api/events')
  await waitFor('a new stream on the same session', () => again.status() === 200)
  t.equal((await app.sse.broadcast('on the same session')).delivered, 1)
  await waitFor('the new stream to receive it', () => again.events.length === 1)
  t.equal(again.events[0].data, 'on the same session')

  const head = open(session, '/api/events', 'HEAD')
  await waitFor('HEAD to end', head.isEnded)
  t.same([head.status(), head.headers()['content-type'], head.rstCode()], [200, 'text/event-stream; charset=utf-8', 0], 'HEAD: the stream headers, then its end')
  t.equal(app.sse.size, 1, 'HEAD took no slot')
  t.equal(sessionClosed, false)
  t.same(warnings.map((w) => `${w.name}: ${w.message}`), [], 'no process warning')
})

t.test('HTTP/2: a stream ended at shutdown delivers everything queued before it, even behind flow control', async (t) => {
  const { app, port } = await startH2c({ heartbeatMs: 60_000, drainMs: 0 })
  // A 1 KiB window: the server can send the event only as fast as the client reads it.
  const session = http2.connect(`http://127.0.0.1:${port}`, { settings: { initialWindowSize: 1024 } })
  session.on('error', () => {})
  t.teardown(() => session.close())
  const stream = open(session, '/api/events')
  await waitFor('the stream to open', () => app.sse.size === 1 && stream.body().includes('retry:'))
  const big = 'z'.repeat(256 * 1024)
  app.sse.broadcast(big)
  const closed = app.close()
  await waitFor('the stream to end', stream.isEnded)
  // close() then waits for the session, which the client ends.
  session.close()
  await closed
  t.equal(stream.rstCode(), 0, 'ended cleanly')
  t.equal(stream.events.length, 1, 'the whole event arrived')
  t.equal(stream.events[0].data.length, big.length)
  t.match(stream.body(), /retry: \d+\n\n$/, 'and the drain\'s retry: after it')
})

t.test('HTTP/2: of two streams on one session, the one whose reader stalls is swept as dead; the other keeps receiving', async (t) => {
  const { app, port } = await startH2c({ heartbeatMs: 50, maxAgeMs: 0 })
  t.teardown(() => app.close())
  // A 1 KiB stream window: the stalled stream's events pile up on the server, in its own buffer.
  const session = http2.connect(`http://127.0.0.1:${port}`, { settings: { initialWindowSize: 1024 } })
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  const stalled = session.request({ ':path': '/api/events' })
  stalled.on('error', () => {})
  stalled.pause()
  const live = open(session, '/api/events')
  await waitFor('both streams open', () => app.sse.size === 2 && live.body().includes('retry:'))
  const payload = 'p'.repeat(4096)
  for (let i = 0; i < 20; i++) await app.sse.broadcast(payload)
  await waitFor('the live stream to read all 20', () => live.events.length === 20)
  await waitFor('the stalled stream to be swept', () => app.sse.stats().deadSwept === 1, 3000)
  // Reset (RST_STREAM) with what it had not read still unsent: its rstCode is set at once.
  await waitFor('the stalled stream to be reset', () => stalled.rstCode !== undefined)
  t.equal(session.closed, false, 'the session is kept')
  t.equal(app.sse.stats().dropped, 0, 'swept for stalling, not dropped at its byte budget')
  t.equal((await app.sse.broadcast('after the sweep')).delivered, 1)
  await waitFor('the live stream to receive it', () => live.events.length === 21)
  t.equal(live.isEnded(), false, 'the live stream and its session go on')
})

t.test('HTTP/2 ghost slots: HEADERS then RST_STREAM while an async hook runs, 30 times on one session: no slot taken, a real stream is then admitted at capacity 1', async (t) => {
  let release: () => void = () => {}
  const hookReleased = new Promise<void>((resolve) => { release = resolve })
  let inHook = 0
  let handled = 0
  const app = Fastify({ http2: true, logger: false })
  await app.register(towerSse, { path: false, maxClients: 1, heartbeatMs: 60_000 })
  app.get('/slow', {
    eventStream: true,
    preHandler: async () => {
      inHook++
      await hookReleased
    }
  }, async (_request, reply) => {
    try {
      await reply.eventStream.subscribe()
    } finally {
      handled++
    }
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const session = http2.connect(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  const ghosts = Array.from({ length: 30 }, () => {
    const req = session.request({ ':path': '/slow' })
    req.on('error', () => {})
    return req
  })
  await waitFor('every ghost in the hook', () => inHook === 30)
  for (const ghost of ghosts) ghost.close(http2.constants.NGHTTP2_CANCEL)
  await waitFor('every ghost reset', () => ghosts.every((g) => g.closed))
  // One ping round trip: the server has read every RST_STREAM sent before it.
  await new Promise<void>((resolve) => session.ping(() => resolve()))
  release()
  await waitFor('every ghost\'s handler to finish', () => handled === 30)
  t.same([app.sse.stats().current, app.sse.stats().accepted, app.sse.stats().rejected], [0, 0, 0], 'no slot taken, none refused')
  const real = open(session, '/slow')
  await waitFor('the real stream open', () => real.body().includes('retry:'))
  t.equal(real.status(), 200)
  t.equal(app.sse.size, 1)
})

t.test('HTTP/2: the heartbeat sweeps a stream whose http2 stream is closed (the compatibility response still says writable)', async (t) => {
  const ended: string[] = []
  // Opened only after its stream is gone: its close fired before any listener, as for a stream
  // admitted while its client left.
  const { res, close } = await resetResponse()
  t.teardown(close)
  t.equal(res.writable, true, 'Node\'s compatibility response: still writable')
  const stream = subscriberOn(res as unknown as ServerResponse, { maxBufferedBytes: 1 << 20, finished: (_s, why) => ended.push(why) })
  stream.heartbeat(HEARTBEAT_FRAME)
  t.same(ended, ['deadSwept'], 'swept at the first beat')
})
