/**
 * Pins each Fastify/Node internal lib/platform/internals.ts reads, on the real thing: an upgrade that moves
 * one fails here, by name, instead of silently turning off the guard built on it.
 */
import http from 'node:http'
import http2 from 'node:http2'
import type { AddressInfo, Socket } from 'node:net'
import t from 'tap'
import Fastify from 'fastify'
import { answers503OnClosing, bodySocket, fastifyState, FindMyWay, hasLeft, routerRules, isHttp2, isPipelinedBehind, needsDrain, unsentBytes } from '../lib/platform/internals'
import { takeOverClosingRequests } from '../lib/platform/request-takeover'
import { endAndClose, openUntilClose } from '../lib/platform/server-closes-first'
import { request } from './fixtures/tower'
import { listenOnLoopback } from './fixtures/loopback-server'
import { rawExchange } from './fixtures/raw-http'
import { waitFor } from './fixtures/sse-connection'
import { resetResponse } from './fixtures/h2-reset-response'

t.test('Fastify keeps its closing flag under Symbol(fastify.state): false before close(), true once close() starts', async (t) => {
  const app = Fastify({ logger: false })
  await app.ready()
  const state = fastifyState(app)
  t.equal(state?.closing, false, 'found, and not closing')
  let duringClose: boolean | undefined
  app.addHook('preClose', async () => { duringClose = fastifyState(app)?.closing })
  await app.close()
  t.equal(duringClose, true, 'closing while preClose hooks run')
})

t.test('Fastify keeps return503OnClosing under Symbol(fastify.options), default on', async (t) => {
  t.equal(answers503OnClosing(Fastify()), true, 'default: Fastify answers 503 itself')
  t.equal(answers503OnClosing(Fastify({ return503OnClosing: true })), true)
  t.equal(answers503OnClosing(Fastify({ return503OnClosing: false })), false, 'off: routes answer during close')
  const child = Fastify({ return503OnClosing: false })
  let inPlugin: boolean | undefined
  await child.register(async (scope) => { inPlugin = answers503OnClosing(scope) })
  t.equal(inPlugin, false, 'read the same from an encapsulated plugin')
})

t.test('Fastify keeps its router rules under Symbol(fastify.options).routerOptions; its own find-my-way matches by them', async (t) => {
  const app = Fastify({ routerOptions: { ignoreTrailingSlash: true, caseSensitive: false, maxParamLength: 50 } })
  const rules = routerRules(app)
  t.match(rules, { ignoreTrailingSlash: true, caseSensitive: false, maxParamLength: 50, ignoreDuplicateSlashes: false })
  const router = FindMyWay(rules)
  router.on('GET', '/u/:id/events', () => {})
  t.ok(router.find('GET', '/U/42/Events/'), 'a trailing slash and another case match as Fastify\'s rules say')
  t.equal(router.find('GET', '/u/42/profile'), null)
})

t.test('Node HTTP/1: a request pipelined behind another has no socket until its turn', async (t) => {
  const seen: Array<{ url: string | undefined, behind: boolean, h2: boolean }> = []
  const server = http.createServer((req, res) => {
    seen.push({ url: req.url, behind: isPipelinedBehind(res), h2: isHttp2(res) })
    // The first is held open (like a stream), so the second stays behind it.
  })
  const { port, close } = await listenOnLoopback(server)
  t.teardown(close)
  const exchange = rawExchange(port, 'GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n\r\n')
  t.teardown(() => exchange.socket.destroy())
  await waitFor('both requests parsed', () => seen.length === 2)
  t.same(seen, [{ url: '/first', behind: false, h2: false }, { url: '/second', behind: true, h2: false }])
})

t.test('Node HTTP/1: bytes a stalled reader has not taken wait in the socket handle\'s writeQueueSize', async (t) => {
  let response: http.ServerResponse | undefined
  const server = http.createServer((_req, res) => {
    res.writeHead(200)
    res.write('first')
    response = res
  })
  const { port, close } = await listenOnLoopback(server)
  t.teardown(close)
  const exchange = rawExchange(port, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
  t.teardown(() => exchange.socket.destroy())
  await waitFor('the response', () => response !== undefined && exchange.text().length > 0)
  exchange.socket.pause()
  const res = response as http.ServerResponse
  t.equal(unsentBytes(res), 0, 'nothing waiting yet')
  t.equal(needsDrain(res), false)
  // More than loopback's kernel buffers take: the rest waits in the handle's queue (once the
  // response uncorks its socket, a tick later).
  res.write(Buffer.alloc(64 * 1024 * 1024))
  await waitFor('bytes in the socket handle\'s queue', () => unsentBytes(res) > 0)
  t.ok(unsentBytes(res) < 64 * 1024 * 1024, `${unsentBytes(res)} bytes in the handle's queue, the kernel holds the rest`)
  t.equal(needsDrain(res), true, 'and the response is past its high-water mark')
})

t.test('Node HTTP/2: each stream has its own buffer and queue; the compatibility response reports the stream', async (t) => {
  const responses: http2.Http2ServerResponse[] = []
  const server = http2.createServer((_req, res) => {
    res.writeHead(200)
    responses.push(res)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  // A 1 KiB stream window: a stream whose reader does not read takes almost nothing.
  const session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { settings: { initialWindowSize: 1024 } })
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  const stalled = session.request({ ':path': '/stalled' })
  stalled.pause()
  let liveBytes = 0
  const live = session.request({ ':path': '/live' })
  live.on('data', (chunk: Buffer) => { liveBytes += chunk.length })
  await waitFor('both streams on the server', () => responses.length === 2)
  const [onStalled, onLive] = responses.map((res) => res as unknown as http.ServerResponse)
  t.same([isHttp2(onStalled), isHttp2(onLive)], [true, true])
  t.equal(isPipelinedBehind(onLive), false, 'an HTTP/2 response has its (proxy) socket')
  const chunk = Buffer.alloc(4096)
  for (let i = 0; i < 20; i++) {
    onStalled.write(chunk)
    onLive.write(chunk)
  }
  await waitFor('the live stream to read all it was sent', () => liveBytes === 20 * 4096)
  t.equal(needsDrain(onStalled), true, 'the stalled stream is past its high-water mark')
  t.ok(unsentBytes(onStalled) > 0, `the stalled stream has ${unsentBytes(onStalled)} bytes in its own queue`)
  t.equal(needsDrain(onLive), false, 'the live one on the same session is not')
  t.equal(unsentBytes(onLive), 0)
  t.equal(onStalled.writableNeedDrain, undefined, 'Node\'s compatibility response itself has no writableNeedDrain (why needsDrain asks the stream)')
})

t.test('hasLeft: HTTP/1 destroys the response when the client goes; HTTP/2 only closes the stream (the response stays writable)', async (t) => {
  const h1 = new Promise<http.ServerResponse>((resolve) => {
    const server = http.createServer((_req, res) => {
      t.equal(hasLeft(res), false, 'HTTP/1: there while connected')
      res.once('close', () => { resolve(res); server.close() })
    })
    void listenOnLoopback(server).then(({ port }) => {
      const exchange = rawExchange(port, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
      server.once('request', () => setImmediate(() => exchange.socket.destroy()))
    })
  })
  t.equal(hasLeft(await h1), true, 'HTTP/1: gone once its socket closed')

  const { res, close } = await resetResponse((open) => {
    t.equal(hasLeft(open as unknown as http.ServerResponse), false, 'HTTP/2: there while its stream is open')
  })
  t.teardown(close)
  t.same([res.writable, res.stream.closed], [true, true], 'Node\'s compatibility response still says writable; its stream says closed')
  t.equal(hasLeft(res as unknown as http.ServerResponse), true, 'HTTP/2: gone, read from the stream')
})

t.test('Node HTTP/1: useChunkedEncodingByDefault off sends a body without a length unframed, delimited by the server\'s close', async (t) => {
  const server = http.createServer((req, res) => {
    if (req.url === '/plain') {
      // Node's default, for contrast: no length, so the body is chunked and ends with a last chunk.
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.end('hello')
      return
    }
    openUntilClose(res, 200, { 'content-type': 'text/plain' })
    res.write('hel')
    endAndClose(res, 'lo')
  })
  const { port, close } = await listenOnLoopback(server)
  t.teardown(close)
  const plain = rawExchange(port, 'GET /plain HTTP/1.1\r\nHost: x\r\n\r\n')
  t.teardown(() => plain.socket.destroy())
  await waitFor('the chunked response', () => plain.text().endsWith('0\r\n\r\n'))
  t.match(plain.text(), /\r\nTransfer-Encoding: chunked\r\n/i, 'Node chunks by default')
  const exchange = rawExchange(port, 'GET /stream HTTP/1.1\r\nHost: x\r\n\r\n')
  t.teardown(() => exchange.socket.destroy())
  await waitFor('the server to close', () => exchange.isClosed())
  const [head, body] = exchange.text().split('\r\n\r\n')
  t.notMatch(head, /transfer-encoding|content-length/i, 'neither a length nor chunks: the body runs until the close')
  t.match(head, /\r\nConnection: close/i)
  t.equal(body, 'hello', 'the bytes as written, no chunk framing')
})

t.test('Fastify answers through its server\'s request listeners: the takeover swaps them, routes still answer, and while closing the stream path gets the refusal', async (t) => {
  const app = Fastify({ logger: false })
  app.get('/events', async () => 'a stream')
  app.get('/other', async () => 'other')
  let release = (): void => {}
  const held = new Promise<void>((resolve) => { release = resolve })
  // close() runs preClose hooks while the server still listens and Fastify's closing flag is set.
  app.addHook('preClose', async () => { await held })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const fastifyListeners = app.server.listeners('request')
  t.equal(fastifyListeners.length, 1, 'Fastify serves through one request listener on its server')
  const addRoute = takeOverClosingRequests(app, (res) => {
    res.writeHead(503, { 'x-refused-by': 'tower-sse' })
    res.end()
  })
  t.ok(addRoute, 'a Fastify it knows: taken over')
  addRoute?.(['GET'], '/events', undefined)
  t.not(app.server.listeners('request')[0], fastifyListeners[0], 'the listener is swapped')
  const port = (app.server.address() as AddressInfo).port
  t.equal((await request(port, 'GET', '/events')).body, 'a stream', 'not closing: Fastify routes the stream path as before')
  t.equal((await request(port, 'GET', '/other')).body, 'other')
  const closing = app.close()
  t.teardown(async () => { release(); await closing })
  await waitFor('close() to begin', () => fastifyState(app)?.closing === true)
  const refused = await request(port, 'GET', '/events')
  t.equal(refused.headers['x-refused-by'], 'tower-sse', 'closing: the stream path gets the plugin\'s refusal')
  const other = await request(port, 'GET', '/other')
  t.equal(other.status, 503, 'closing: every other request still gets Fastify\'s own 503')
  t.equal(other.headers['x-refused-by'], undefined)
  release()
  await closing
})

t.test('Node HTTP/1: a close-delimited response with its head out writes straight to its socket; bytes written there go out in order with its own', async (t) => {
  const seen: Array<string | null> = []
  const server = http.createServer((req, res) => {
    const at = (label: string): void => { seen.push(bodySocket(res) === null ? null : label) }
    if (req.url === '/chunked') {
      res.writeHead(200)
      res.write('first')
      at('chunked')
      res.end()
      return
    }
    if (req.url === '/length') {
      res.useChunkedEncodingByDefault = false
      res.writeHead(200, { 'content-length': '10' })
      res.write('first')
      at('length')
      res.end('12345')
      return
    }
    openUntilClose(res, 200, {})
    at('before the head is out')
    res.write('first')
    const socket = bodySocket(res)
    t.equal(socket, res.socket, 'once the head is out: the response\'s own socket')
    socket?.cork()
    socket?.write('direct')
    t.equal(res.writableLength, socket?.writableLength, 'the response counts what waits in its socket (the byte budget reads either)')
    t.ok(res.writableLength >= 'firstdirect'.length)
    socket?.uncork()
    endAndClose(res, 'end')
  })
  const { port, close } = await listenOnLoopback(server)
  t.teardown(close)
  for (const path of ['/', '/chunked', '/length']) {
    const exchange = rawExchange(port, `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
    await waitFor(`the answer to ${path}`, exchange.isClosed)
    if (path === '/') t.match(exchange.text(), /\r\n\r\nfirstdirectend$/, 'head, the response\'s write, the direct one, then its end: in order')
  }
  t.same(seen, [null, null, null], 'none before its head is out, for a chunked body or for a body with a length')
})

t.test('Node HTTP/1 and HTTP/2: no body socket for a response pipelined behind another, nor for an HTTP/2 stream', async (t) => {
  const behind: Array<Socket | null> = []
  const server = http.createServer((_req, res) => {
    openUntilClose(res, 200, {})
    res.write('first')
    behind.push(bodySocket(res))
  })
  const { port, close } = await listenOnLoopback(server)
  t.teardown(close)
  const exchange = rawExchange(port, 'GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n\r\n')
  t.teardown(() => exchange.socket.destroy())
  await waitFor('both requests', () => behind.length === 2)
  t.not(behind[0], null, 'the first has its socket')
  t.equal(behind[1], null, 'the one behind it has none (its bytes wait in the response)')

  const { close: closeH2 } = await resetResponse((open) => {
    const h2 = open as unknown as http.ServerResponse
    openUntilClose(h2, 200, {})
    h2.write('first')
    t.equal(bodySocket(h2), null, 'HTTP/2: a stream of a shared session, always written through its response')
  })
  t.teardown(closeH2)
})

t.test('Fastify inject: the response light-my-request hands a route sits on a stand-in, not a connection; no body socket', async (t) => {
  const app = Fastify()
  let seen: Socket | null | undefined
  app.get('/', (_request, reply) => {
    reply.hijack()
    openUntilClose(reply.raw, 200, {})
    reply.raw.write('first')
    seen = bodySocket(reply.raw)
    reply.raw.end('end')
  })
  const response = await app.inject('/')
  t.equal(seen, null, 'written through the response, where inject reads the body')
  t.equal(response.body, 'firstend')
})
