// The request the client sends and what the application decides around it: method and body,
// headers computed for every attempt, onResponse (a 401 refreshed and retried), the iterator's
// break, and the error event's fields — on real loopback sockets.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import path from 'node:path'
import t from 'tap'
import { TowerSseClient, TowerSseClientOptionError, TowerSseErrorEvent, type TowerSseAttempt, type TowerSseClientState } from '../lib/client'
import { startScriptedServer } from './fixtures/client-scripted-server'
import { startApp } from './fixtures/app'
import { waitFor } from './fixtures/sse-connection'

// Compile-time: a TowerSseClient stands wherever an EventSource is expected, its handlers typed by its own events.
const asEventSource: (url: string) => EventSource = (url) => new TowerSseClient(url)
void asEventSource
const typed = (client: TowerSseClient): void => {
  // A server's own `event: error` is a MessageEvent: the client's errors are told apart by class.
  client.onerror = (event) => { if (event instanceof TowerSseErrorEvent) void event.error.fatal }
}
void typed

/** Reconnects in milliseconds: only the delays change, never the decisions. */
const FAST = { retryMs: 10, minRetryMs: 0, backoffBaseMs: 5, backoffCapMs: 20, random: () => 0.5 }

function errorsOf (client: TowerSseClient): TowerSseErrorEvent[] {
  const errors: TowerSseErrorEvent[] = []
  client.addEventListener('error', (event) => { if (event instanceof TowerSseErrorEvent) errors.push(event) })
  return errors
}

function waitsOf (client: TowerSseClient): Array<Extract<TowerSseClientState, { kind: 'waiting' }>> {
  const waits: Array<Extract<TowerSseClientState, { kind: 'waiting' }>> = []
  client.addEventListener('statechange', (event) => { if (event.state.kind === 'waiting') waits.push(event.state) })
  return waits
}

t.test('method and body: a POST stream sends its body again on every reconnect, with Last-Event-ID', async (t) => {
  const server = await startScriptedServer((n) => n < 2
    ? { frames: [`id: e${n}\ndata: ${n}\n\n`], then: 'end' }
    : { frames: [], then: 'hold' })
  t.teardown(() => server.close())
  const client = new TowerSseClient(server.url, { ...FAST, method: 'POST', body: JSON.stringify({ prompt: 'hi' }), headers: { 'content-type': 'application/json' } })
  t.teardown(() => client.close())
  const data: string[] = []
  client.addEventListener('message', (event) => data.push(event.data))
  await waitFor('three requests', () => server.requests.length === 3)
  t.same(server.requests.map((r) => r.method), ['POST', 'POST', 'POST'])
  t.same(server.requests.map((r) => r.body), Array(3).fill('{"prompt":"hi"}'), 'the same body on every attempt')
  t.same(server.requests.map((r) => r.headers['last-event-id']), [undefined, 'e0', 'e1'], 'resumed after the last id seen')
  t.same(server.requests.map((r) => r.headers['content-type']), Array(3).fill('application/json'))
  t.same(data, ['0', '1'])
})

t.test('headers as a function: called for every attempt with its number and Last-Event-ID, which the client still sets', async (t) => {
  const server = await startScriptedServer((n) => n < 2
    ? { frames: [`id: e${n}\ndata: ${n}\n\n`], then: 'end' }
    : { frames: [], then: 'hold' })
  t.teardown(() => server.close())
  const calls: TowerSseAttempt[] = []
  let token = 0
  const client = new TowerSseClient(server.url, {
    ...FAST,
    headers: async (attempt) => {
      calls.push(attempt)
      await new Promise((resolve) => setImmediate(resolve))
      // A function that names Last-Event-ID itself does not replace the one the client tracks.
      return { authorization: `Bearer t${++token}`, 'Last-Event-ID': 'forged' }
    }
  })
  t.teardown(() => client.close())
  await waitFor('three requests', () => server.requests.length === 3)
  t.same(server.requests.map((r) => r.headers.authorization), ['Bearer t1', 'Bearer t2', 'Bearer t3'], 'a fresh value per attempt')
  t.same(server.requests.map((r) => r.headers['last-event-id']), ['forged', 'e0', 'e1'], 'the client\'s id wins once it has one')
  t.same(calls.map((c) => c.lastEventId), ['', 'e0', 'e1'])
  t.same(calls.map((c) => c.attempt), [1, 1, 1], 'streams that ended normally are no failed attempts')
  t.same(server.requests.map((r) => r.headers.accept), Array(3).fill('text/event-stream'))
})

t.test('the app\'s own Accept header is sent as it is; without one, the client asks for text/event-stream', async (t) => {
  const server = await startScriptedServer(() => ({ frames: [], then: 'hold' }))
  t.teardown(() => server.close())
  const accept = 'text/event-stream;q=1, application/json;q=0.5'
  const own = new TowerSseClient(server.url, { ...FAST, headers: { Accept: accept } })
  t.teardown(() => own.close())
  await waitFor('its request', () => server.requests.length === 1)
  const plain = new TowerSseClient(server.url, FAST)
  t.teardown(() => plain.close())
  await waitFor('the other request', () => server.requests.length === 2)
  t.same(server.requests.map((r) => r.headers.accept), [accept, 'text/event-stream'])
})

t.test('onResponse asks for a retry of a 200 stream: the response is let go (the server sees its stream end) before the next attempt', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000 }, { forceCloseConnections: true })
  t.teardown(() => app.close())
  let attempts = 0
  const client = new TowerSseClient(`http://127.0.0.1:${port}/api/events`, {
    ...FAST,
    onResponse: () => ++attempts === 1 ? 'retry' : undefined
  })
  t.teardown(() => client.close())
  await waitFor('the second attempt open', () => client.readyState === TowerSseClient.OPEN)
  await waitFor('the server to see the first stream let go', () => app.sse.stats().disconnected === 1)
  t.equal(attempts, 2)
  t.equal(app.sse.size, 1, 'one stream held: the one the client reads')
})

t.test('onResponse: a 401 refreshes the token and is retried, where without it the client stops for good', async (t) => {
  let valid = 'old'
  const server = await startScriptedServer((_n, request) => request.headers.authorization === `Bearer ${valid}`
    ? { frames: ['data: in\n\n'], then: 'hold' }
    : { status: 401, headers: { 'content-type': 'application/json' }, body: '{"error":"expired"}' })
  t.teardown(() => server.close())
  valid = 'new'
  let token = 'old'
  const seen: number[] = []
  const client = new TowerSseClient(server.url, {
    ...FAST,
    headers: () => ({ authorization: `Bearer ${token}` }),
    onResponse: async (response) => {
      seen.push(response.status)
      if (response.status !== 401) return undefined
      token = 'new'
      return 'retry'
    }
  })
  t.teardown(() => client.close())
  const errors = errorsOf(client)
  const waits = waitsOf(client)
  await waitFor('the stream', () => client.readyState === TowerSseClient.OPEN)
  t.same(server.requests.map((r) => r.headers.authorization), ['Bearer old', 'Bearer new'])
  t.same(seen, [401, 200], 'every response is shown to onResponse')
  t.same(waits.map((w) => [w.reason, w.status, w.failures]), [['retry-requested', 401, 1]], 'one retry, counted as a failed attempt (backoff)')
  t.same(errors.map((e) => [e.code, e.status, e.fatal]), [['TOWER_SSE_CLIENT_HTTP', 401, false]], 'the error event carries the fields itself')

  const plain = new TowerSseClient(server.url, { ...FAST, headers: { authorization: 'Bearer old' } })
  t.teardown(() => plain.close())
  const plainErrors = errorsOf(plain)
  await waitFor('the plain client to stop', () => plain.readyState === TowerSseClient.CLOSED)
  t.same(plainErrors.map((e) => [e.code, e.status, e.fatal]), [['TOWER_SSE_CLIENT_FATAL', 401, true]])
  t.equal(plainErrors[0].error.fatal, true, 'and on its error, as before')
})

t.test('a headers or onResponse function that throws is a failed attempt (backoff), one that answers nonsense stops the client', async (t) => {
  const server = await startScriptedServer(() => ({ frames: ['data: in\n\n'], then: 'hold' }))
  t.teardown(() => server.close())
  let failures = 2
  const flaky = new TowerSseClient(server.url, {
    ...FAST,
    headers: () => {
      if (failures-- > 0) throw new Error('token service down')
      return {}
    }
  })
  t.teardown(() => flaky.close())
  const errors = errorsOf(flaky)
  const waits = waitsOf(flaky)
  await waitFor('the stream after two failures', () => flaky.readyState === TowerSseClient.OPEN)
  t.same(waits.map((w) => [w.reason, w.failures]), [['hook-error', 1], ['hook-error', 2]])
  t.same(errors.map((e) => e.code), ['TOWER_SSE_CLIENT_HOOK', 'TOWER_SSE_CLIENT_HOOK'])
  t.match(errors[0].error.message, /the headers function failed: token service down/)
  t.equal(server.requests.length, 1, 'no request went out for the failed attempts')

  const throwing = new TowerSseClient(server.url, { ...FAST, onResponse: () => { throw new Error('boom') } })
  t.teardown(() => throwing.close())
  const throwWaits = waitsOf(throwing)
  await waitFor('two hook errors', () => throwWaits.length >= 2)
  t.same(throwWaits.slice(0, 2).map((w) => [w.reason, w.status]), [['hook-error', 200], ['hook-error', 200]])

  const badHeaders = new TowerSseClient(server.url, { ...FAST, headers: () => ({ 'bad name': 'x' }) })
  t.teardown(() => badHeaders.close())
  await waitFor('bad headers to stop the client', () => badHeaders.readyState === TowerSseClient.CLOSED)
  const closed = badHeaders.state as Extract<TowerSseClientState, { kind: 'closed' }>
  t.match(closed.error?.message, /option "headers\(\)" must be headers fetch accepts/)
  t.equal(closed.error?.fatal, true)

  const badAnswer = new TowerSseClient(server.url, { ...FAST, onResponse: () => 'again' as unknown as 'retry' })
  t.teardown(() => badAnswer.close())
  await waitFor('a bad answer to stop the client', () => badAnswer.readyState === TowerSseClient.CLOSED)
  t.match((badAnswer.state as Extract<TowerSseClientState, { kind: 'closed' }>).error?.message, /onResponse must return undefined or 'retry', got "again"/)
})

t.test('close() while the headers function runs: no request goes out', async (t) => {
  const server = await startScriptedServer(() => ({ frames: [], then: 'hold' }))
  t.teardown(() => server.close())
  let release: (headers: Record<string, string>) => void = () => {}
  const client = new TowerSseClient(server.url, { ...FAST, headers: () => new Promise((resolve) => { release = resolve }) })
  await waitFor('the headers function to be called', () => client.state.kind === 'connecting')
  await new Promise((resolve) => setImmediate(resolve))
  client.close()
  release({})
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.equal(server.requests.length, 0)
  t.equal(client.readyState, TowerSseClient.CLOSED)
})

t.test('options: bad methods, bodies, headers and onResponse are refused by name at construction', async (t) => {
  const url = 'http://127.0.0.1:9/events'
  const refused = (options: object, option: string, pattern: RegExp): void => {
    let thrown: unknown
    try {
      new TowerSseClient(url, options).close()
    } catch (error) {
      thrown = error
    }
    t.ok(thrown instanceof TowerSseClientOptionError, `${option}: ${String(thrown)}`)
    t.equal((thrown as TowerSseClientOptionError).option, option)
    t.match((thrown as Error).message, pattern)
  }
  refused({ method: 'HEAD' }, 'method', /other than HEAD, CONNECT, TRACE or TRACK/)
  refused({ method: 'trace' }, 'method', /got "trace"/)
  refused({ method: 'PO ST' }, 'method', /an HTTP method/)
  refused({ body: 'x' }, 'body', /absent with method GET/)
  // fetch refuses a body with GET whatever its case: every attempt would fail, and be retried for ever.
  refused({ method: 'get', body: 'x' }, 'body', /absent with method GET/)
  refused({ method: 'POST', body: new ReadableStream() }, 'body', /sent again on every reconnect/)
  refused({ method: 'POST', body: { a: 1 } }, 'body', /a string, URLSearchParams/)
  refused({ headers: { 'bad name': 'x' } }, 'headers', /headers fetch accepts/)
  refused({ headers: { a: 1 } }, 'headers', /an object of string header values/)
  refused({ onResponse: 'retry' }, 'onResponse', /a function/)
  for (const body of ['x', new URLSearchParams('a=1'), new Uint8Array([1]), new Blob(['x'])]) {
    new TowerSseClient(url, { method: 'POST', body }).close()
  }
})

t.test('break out of for await closes the stream: the server sees it end and the process exits by itself', async (t) => {
  const server = await startScriptedServer(() => ({ frames: ['data: 1\n\n', 'data: 2\n\n', 'data: 3\n\n'], then: 'hold' }))
  t.teardown(() => server.close())
  const root = path.join(__dirname, '..')
  const script = `
    const { TowerSseClient } = require(${JSON.stringify(path.join(root, 'lib', 'client', 'index.ts'))})
    ;(async () => {
      const client = new TowerSseClient(${JSON.stringify(server.url)})
      for await (const event of client) {
        process.stdout.write(event.data + '\\n')
        if (event.data === '2') break
      }
      process.stdout.write('state ' + client.readyState + '\\n')
    })()
  `
  const child = spawn(process.execPath, ['--import', path.join(root, 'scripts', 'typescript-hooks.mjs'), '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  // Bounded: a client left open keeps the child alive, and the test then fails instead of hanging.
  const killer = setTimeout(() => child.kill('SIGKILL'), 15_000)
  const [code, signal] = await once(child, 'exit') as [number | null, NodeJS.Signals | null]
  clearTimeout(killer)
  t.equal(signal, null, 'exited by itself (not killed at the bound)')
  t.equal(code, 0)
  t.same(out.trim().split('\n'), ['1', '2', 'state 2'], 'two events, then CLOSED')
})
