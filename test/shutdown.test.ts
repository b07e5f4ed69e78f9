import { spawn } from 'node:child_process'
import net from 'node:net'
import path from 'node:path'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import type { AddressInfo } from 'node:net'
import towerSse from '../lib'
import { startApp } from './fixtures/app'
import { connect, waitFor } from './fixtures/sse-connection'

/** One raw request on its own socket: what came back, and whether the server's FIN came first. */
function rawRequest (port: number, path = '/api/events', method = 'GET', host = 'localhost'): Promise<{ text: string, serverClosedFirst: boolean }> {
  return new Promise((resolve, reject) => {
    // allowHalfOpen: our side stays open after the server's FIN, so 'end' can only be theirs.
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true })
    let text = ''
    let serverClosedFirst = false
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => { text += chunk })
    socket.once('end', () => {
      serverClosedFirst = true
      socket.end()
    })
    socket.once('close', () => resolve({ text, serverClosedFirst }))
    socket.once('error', reject)
    socket.write(`${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n${method === 'POST' ? 'Content-Length: 0\r\n' : ''}\r\n`)
  })
}

function parseResponse (text: string): { status: number, headers: Record<string, string>, body: string } {
  const [head, body] = text.split('\r\n\r\n')
  const [statusLine, ...lines] = head.split('\r\n')
  const headers = Object.fromEntries(lines.map((l) => {
    const colon = l.indexOf(':')
    return [l.slice(0, colon).toLowerCase(), l.slice(colon + 1).trim()]
  }))
  return { status: Number(statusLine.split(' ')[1]), headers, body }
}

/**
 * An app with the plugin and, registered after it, a preClose hook that keeps close() in progress
 * until `release()`: requests made in between meet a closing server, whatever the machine's speed.
 */
async function appHeldInClose (routes?: (app: FastifyInstance) => Promise<void>): Promise<{ app: FastifyInstance, port: number, closeStarted: Promise<void>, release: () => void }> {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { retryAfterSeconds: 5, storm: { maxRetryAfterSeconds: 60 } })
  app.get('/other', async () => 'ok')
  await routes?.(app)
  let release: () => void = () => {}
  const released = new Promise<void>((resolve) => { release = resolve })
  let started: () => void = () => {}
  const closeStarted = new Promise<void>((resolve) => { started = resolve })
  app.addHook('preClose', async () => {
    started()
    await released
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, port: (app.server.address() as AddressInfo).port, closeStarted, release }
}

t.test('held refusals are answered when close() starts, and close() does not wait for their holds', async (t) => {
  // A hold far longer than this test may take: only shutdown can end it.
  const { app, port } = await startApp({
    maxClients: 1,
    retryAfterSeconds: 5,
    storm: { refusalsPerSecond: 0, tarpitMs: 60_000, maxRetryAfterSeconds: 60 }
  })
  const holder = await connect(port)
  // connect() resolves with the response, which a held refusal does not have yet.
  const pending = Array.from({ length: 3 }, () => connect(port))
  await waitFor('three refusals held', () => app.sse.stats().tarpitted === 3)
  let closed = false
  void app.close().then(() => { closed = true })
  // Not a speed check: this bound only turns a close() that waits for the holds into a failure.
  await waitFor('close() to resolve', () => closed, 10_000)
  const held = await Promise.all(pending)
  await waitFor('the held refusals to end', () => held.every((c) => c.isEnded()))
  for (const c of held) {
    t.equal(c.status, 503)
    const seconds = Number(c.headers['retry-after'])
    t.ok(seconds >= 5 && seconds <= 60, `Retry-After ${seconds}`)
    t.equal(JSON.parse(c.body).retryAfterSeconds, seconds)
  }
  t.equal(app.sse.stats().rejected, 3, 'each refusal counted once')
  await waitFor('the open stream to end', () => holder.isEnded())
})

t.test('during close(), a new stream request gets the plugin\'s refusal, not Fastify\'s closing 503', async (t) => {
  const { app, port, closeStarted, release } = await appHeldInClose()
  const stream = await connect(port)
  const closed = app.close()
  await closeStarted
  const { text, serverClosedFirst } = await rawRequest(port)
  release()
  await closed
  const response = parseResponse(text)
  t.equal(response.status, 503)
  t.ok(Number(response.headers['retry-after']) >= 5, `Retry-After: ${response.headers['retry-after']}`)
  t.equal(response.headers['content-length'], undefined, 'no length: the body runs until the server closes')
  t.match(JSON.parse(response.body), { code: 'TOWER_SSE_CLOSING', reason: 'closing' })
  t.ok(serverClosedFirst, 'the server closed first')
  t.equal(app.sse.stats().rejected, 1, 'counted as a refusal')
  t.equal(app.sse.stats().shutdown, 1)
  await waitFor('the open stream to end', () => stream.isEnded())
})

t.test('a stream request already past its route\'s onRequest when close() starts is refused when it comes to open: closing, never a stream', async (t) => {
  let arrived = false
  let go: () => void = () => {}
  const gate = new Promise<void>((resolve) => { go = resolve })
  const { app, port, closeStarted, release } = await appHeldInClose(async (app) => {
    app.get('/held', {
      eventStream: true,
      preHandler: async () => {
        arrived = true
        await gate
      }
    }, (_request, reply) => reply.eventStream.subscribe())
  })
  const held = connect(port, '/held')
  await waitFor('the request in its preHandler', () => arrived)
  const closed = app.close()
  await closeStarted
  go()
  const answer = await held
  await answer.ended
  t.equal(answer.status, 503)
  t.match(JSON.parse(answer.body), { code: 'TOWER_SSE_CLOSING', reason: 'closing' })
  t.match(app.sse.stats(), { accepted: 0, refusals: { closing: 1 } })
  answer.destroy()
  release()
  await closed
})

t.test('during close(), other routes still get Fastify\'s own answer', async (t) => {
  const { app, port, closeStarted, release } = await appHeldInClose()
  const closed = app.close()
  await closeStarted
  const other = parseResponse((await rawRequest(port, '/other')).text)
  const withQuery = parseResponse((await rawRequest(port, '/api/events?topics=a')).text)
  release()
  await closed
  t.equal(other.status, 503)
  t.equal(other.headers['retry-after'], undefined, 'Fastify\'s 503, untouched')
  t.equal(withQuery.status, 503)
  t.not(withQuery.headers['retry-after'], undefined, 'the stream path with a query string gets the plugin\'s refusal')
  t.equal(app.sse.stats().rejected, 1)
})

t.test('during close(), HEAD and POST on the stream path get Fastify\'s answer and are not counted as closing refusals', async (t) => {
  const { app, port, closeStarted, release } = await appHeldInClose()
  const closed = app.close()
  await closeStarted
  const head = parseResponse((await rawRequest(port, '/api/events', 'HEAD')).text)
  const post = parseResponse((await rawRequest(port, '/api/events', 'POST')).text)
  release()
  await closed
  for (const [method, response] of [['HEAD', head], ['POST', post]] as const) {
    t.equal(response.status, 503, `${method}: Fastify's closing 503`)
    t.equal(response.headers['retry-after'], undefined, `${method}: without the plugin's Retry-After`)
  }
  t.equal(app.sse.stats().rejected, 0, 'no refusal counted')
})

t.test('during close(), the app\'s own stream routes (prefix, parameters, constraints) get the plugin\'s refusal too', async (t) => {
  const { app, port, closeStarted, release } = await appHeldInClose(async (app) => {
    await app.register(async (scope) => {
      scope.get('/u/:id/events', { eventStream: true, onRequest: async () => {} }, (_request, reply) => reply.eventStream.subscribe())
      scope.post('/u/:id/feed', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
      scope.get('/u/:id/profile', async () => 'not a stream')
      scope.get('/local/events', { eventStream: true, constraints: { host: 'streams.local' } }, (_request, reply) => reply.eventStream.subscribe())
    }, { prefix: '/v1' })
  })
  const closed = app.close()
  await closeStarted
  const responses = new Map<string, ReturnType<typeof parseResponse>>()
  const requests = [
    ['GET', '/v1/u/42/events?topics=a'], ['POST', '/v1/u/7/feed'], ['GET', '/v1/u/42/profile'], ['GET', '/u/42/events'],
    ['GET', '/v1/local/events'], ['GET', '/v1/local/events', 'streams.local']
  ]
  for (const [method, url, host] of requests) {
    responses.set(`${method} ${host ?? ''}${url}`, parseResponse((await rawRequest(port, url, method, host)).text))
  }
  release()
  await closed
  const refusals = [...responses].map(([request, { status, headers, body }]) =>
    [request, status, headers['retry-after'] === undefined ? 'Fastify' : (JSON.parse(body) as { code: string }).code])
  t.same(refusals, [
    ['GET /v1/u/42/events?topics=a', 503, 'TOWER_SSE_CLOSING'],
    ['POST /v1/u/7/feed', 503, 'TOWER_SSE_CLOSING'],
    ['GET /v1/u/42/profile', 503, 'Fastify'],
    ['GET /u/42/events', 503, 'Fastify'],
    ['GET /v1/local/events', 503, 'Fastify'],
    ['GET streams.local/v1/local/events', 503, 'TOWER_SSE_CLOSING']
  ], 'the stream routes as Fastify routes them: prefix, parameters, method, host constraint')
  t.equal(app.sse.stats().refusals.closing, 3, 'each counted as a closing refusal')
})

t.test('an app that never calls close() still exits: the plugin\'s timers do not hold the process', async (t) => {
  const script = path.join(__dirname, 'fixtures', 'ready-and-leave.ts')
  const child = spawn(process.execPath, [...process.execArgv, script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  let exitCode: number | null | undefined
  child.once('exit', (code) => { exitCode = code })
  t.teardown(() => { if (exitCode === undefined) child.kill() })
  // The bound only turns a process kept alive into a failure; it is not a speed check.
  await waitFor('the child to exit by itself', () => exitCode !== undefined, 20_000)
  t.equal(exitCode, 0)
  t.equal(out.trim(), 'ready', 'the plugin was registered and ready before the child exited')
})

t.test('the closing takeover is installed only where Fastify answers 503 itself while closing', async (t) => {
  for (const return503OnClosing of [true, false]) {
    const app = Fastify({ logger: false, return503OnClosing })
    const fastifyListeners = app.server.listeners('request')
    await app.register(towerSse)
    await app.ready()
    const same = app.server.listeners('request').every((listener, i) => listener === fastifyListeners[i])
    t.equal(same, !return503OnClosing, `return503OnClosing ${return503OnClosing}: ${same ? 'Fastify\'s listener left as it is' : 'taken over'}`)
    await app.close()
  }
})
