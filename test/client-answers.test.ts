/**
 * tower-sse/client against the plugin's per-request answers, on real sockets: `event: end` closes
 * it as done, a 204 on a reconnect too (an `end` Event), the plugin's own `event: error` stops it
 * for good, and a POST answer cut mid-way is resumed with its body and Last-Event-ID.
 */
import net, { type AddressInfo, type Socket } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import towerSse from '../lib'
import { withTestClocks } from '../lib/testing'
import { TowerSseClient, TowerSseErrorEvent, type TowerSseClientError, type TowerSseClientOptions, type TowerSseMessage } from '../lib/client'
import { waitFor } from './fixtures/sse-connection'

interface Recorded { url: string, body: unknown, lastEventId: string | undefined }

interface Answers {
  app: FastifyInstance
  base: string
  /** Every request that reached a route, in order. */
  requests: Recorded[]
  /** Stream ids the producer of /answer was started for. */
  produced: string[]
  /** Lets every /answer producer past its hold. */
  release: () => void
  /** Destroys every socket the server holds now (a connection cut mid-answer). */
  cut: () => void
}

const TOKENS = 6
const HOLD_AFTER = 3

/**
 * POST /answer: a resumable answer of TOKENS tokens, held after HOLD_AFTER until `release()` when
 * `hold` is set; POST /fails: a resumable answer whose producer throws after two tokens; GET
 * /fails-plain: the same, not resumable; GET /events: a broadcast stream. Keyed by `x-user`.
 */
async function startAnswers (t: Test, { hold = false, ttlMs }: { hold?: boolean, ttlMs?: number } = {}): Promise<Answers> {
  const requests: Recorded[] = []
  const produced: string[] = []
  let release!: () => void
  const released = hold ? new Promise<void>((resolve) => { release = resolve }) : Promise.resolve()
  if (!hold) release = () => {}
  const app = Fastify({ logger: false, forceCloseConnections: true })
  await app.register(towerSse, withTestClocks({
    path: false, heartbeatMs: 60_000, retryMs: 50, keyFn: (request) => String(request.headers['x-user'] ?? 'anon')
  }, { random: () => 0.5 }))
  app.addHook('preHandler', async (request) => {
    const lastEventId = request.headers['last-event-id']
    requests.push({ url: request.url, body: request.body, lastEventId: typeof lastEventId === 'string' ? lastEventId : undefined })
  })
  const failing = async function * (): AsyncGenerator<{ data: string }> {
    yield { data: 'token 0' }
    yield { data: 'token 1' }
    throw new Error('the model fell over')
  }
  app.post('/answer', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
    resumable: ttlMs === undefined ? true : { ttlMs },
    stream: ({ id }) => {
      produced.push(id)
      return (async function * () {
        for (let n = 0; n < TOKENS; n++) {
          if (n === HOLD_AFTER) await released
          yield { data: `token ${n}` }
        }
      })()
    }
  }))
  app.post('/fails', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ resumable: true, stream: failing }))
  app.get('/fails-plain', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ stream: failing() }))
  app.get('/events', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe())
  const sockets = new Set<Socket>()
  app.server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return {
    app,
    base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
    requests,
    produced,
    release,
    cut: () => { for (const socket of sockets) socket.destroy() }
  }
}

const QUESTION = { prompt: 'why is the sky blue?' }
/** A POST answer as an app asks it, reconnecting in milliseconds (only delays change, never decisions). */
function ask (url: string, options: TowerSseClientOptions = {}): TowerSseClient {
  return new TowerSseClient(url, {
    method: 'POST',
    body: JSON.stringify(QUESTION),
    headers: { 'content-type': 'application/json', 'x-user': 'alice' },
    retryMs: 20,
    minRetryMs: 0,
    backoffBaseMs: 20,
    backoffCapMs: 40,
    random: () => 0.5,
    ...options
  })
}

interface Seen {
  /** Every event in order: `type:data` for server events, `error(fatal code)` for the client's own, state kinds. */
  log: string[]
  messages: MessageEvent<string>[]
  ends: Event[]
  clientErrors: TowerSseClientError[]
}

function watch (client: TowerSseClient, names: string[] = []): Seen {
  const seen: Seen = { log: [], messages: [], ends: [], clientErrors: [] }
  client.addEventListener('message', (event) => {
    seen.messages.push(event)
    seen.log.push(event.data)
  })
  for (const name of names) client.addEventListener(name, (event) => seen.log.push(`${name}:${event.data}`))
  client.addEventListener('end', (event) => {
    seen.ends.push(event)
    seen.log.push(event instanceof MessageEvent ? `end:${String(event.data)}` : 'end (no data)')
  })
  client.addEventListener('error', (event) => {
    if (event instanceof TowerSseErrorEvent) {
      seen.clientErrors.push(event.error)
      seen.log.push(`client error (${event.fatal ? 'fatal' : 'retry'} ${event.code})`)
    } else {
      seen.log.push(`error:${event.data}`)
    }
  })
  client.addEventListener('statechange', (event) => { if (event.state.kind !== 'open') seen.log.push(event.state.kind) })
  return seen
}

const tokens = (from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `token ${from + i}`)
/** A window many times the client's delays (20-40 ms here) in which a reconnect would have come: a count, not a speed. */
const reconnectWindow = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 400))

t.test('an answer: the tokens, then `end`; the client closes as done and never asks again', async (t) => {
  const server = await startAnswers(t)
  const client = ask(`${server.base}/answer`)
  t.teardown(() => client.close())
  const seen = watch(client)
  const iterated: TowerSseMessage[] = []
  const iteration = (async () => { for await (const message of client) iterated.push(message) })()
  await iteration
  t.same(seen.log, ['connecting', ...tokens(0, TOKENS), 'end:{}', 'closed'], 'the tokens, `end`, then closed: no error, no wait')
  t.ok(seen.ends[0] instanceof MessageEvent, 'the server\'s `end` is a MessageEvent')
  t.match(client.lastEventId, /^r\.[\w-]+\.end\.[\w-]{16}$/, 'its id is the end\'s, as the server sealed it')
  t.equal((seen.ends[0] as MessageEvent<string>).lastEventId, client.lastEventId)
  t.same(client.state, { kind: 'closed', error: null })
  t.equal(client.readyState, TowerSseClient.CLOSED)
  t.same(iterated.map((m) => m.type === 'end' ? `end:${m.data}` : m.data), [...tokens(0, TOKENS), 'end:{}'],
    'the iterator yields every event, `end` included, then finishes without throwing')
  await reconnectWindow()
  t.equal(server.requests.length, 1, 'one request: no reconnect after the end')
  t.equal(server.produced.length, 1)
})

t.test('a POST answer cut mid-way: reconnects with the same body and the last id, gets the rest once and in order, then `end`', async (t) => {
  const server = await startAnswers(t, { hold: true })
  const client = ask(`${server.base}/answer`)
  t.teardown(() => client.close())
  const seen = watch(client)
  await waitFor(`${HOLD_AFTER} tokens`, () => seen.messages.length === HOLD_AFTER)
  const lastBeforeCut = client.lastEventId
  t.equal(lastBeforeCut, seen.messages[HOLD_AFTER - 1].lastEventId)
  t.match(lastBeforeCut, /^r\.[\w-]+\.\d+\.[\w-]{16}$/, 'a resumable id')
  server.cut()
  // Produced while no connection follows it: the reconnect gets these from the log.
  server.release()
  await waitFor('the client to close', () => client.readyState === TowerSseClient.CLOSED)
  t.same(seen.messages.map((m) => m.data), tokens(0, TOKENS), 'every token once, in order')
  // The plugin's streams are delimited by the close: a cut reads as an ended stream (hence `end`).
  t.same(seen.log.filter((e) => !e.startsWith('token')), ['connecting', 'waiting', 'client error (retry TOWER_SSE_CLIENT_ENDED)', 'connecting', 'end:{}', 'closed'],
    'the stream cut, one reconnect, then the end')
  t.same(client.state, { kind: 'closed', error: null })
  t.same(server.requests.map((r) => [r.url, r.body, r.lastEventId]), [
    ['/answer', QUESTION, undefined],
    ['/answer', QUESTION, lastBeforeCut]
  ], 'the reconnect sent the same body and the last id')
  t.equal(server.produced.length, 1, 'the producer ran once: the reconnect resumed its answer')
  await reconnectWindow()
  t.equal(server.requests.length, 2, 'no request after the end')
})

t.test('a reconnect with the end\'s id is answered 204: an `end` Event, closed, no error; another user\'s id stays a fatal 404', async (t) => {
  const server = await startAnswers(t)
  const first = ask(`${server.base}/answer`)
  watch(first)
  await waitFor('the first answer to end', () => first.readyState === TowerSseClient.CLOSED)
  const endId = first.lastEventId

  const again = ask(`${server.base}/answer`, { lastEventId: endId })
  t.teardown(() => again.close())
  const seen = watch(again)
  await waitFor('the second client to close', () => again.readyState === TowerSseClient.CLOSED)
  t.same(seen.log, ['connecting', 'end (no data)', 'closed'], '`end` (an Event: no data), then closed, no error')
  t.notOk(seen.ends[0] instanceof MessageEvent)
  t.same(again.state, { kind: 'closed', error: null })
  t.same(server.requests.slice(1).map((r) => [r.body, r.lastEventId]), [[QUESTION, endId]])

  const stranger = ask(`${server.base}/answer`, { lastEventId: endId, headers: { 'content-type': 'application/json', 'x-user': 'mallory' } })
  t.teardown(() => stranger.close())
  const refused = watch(stranger)
  await waitFor('the stranger to stop', () => stranger.readyState === TowerSseClient.CLOSED)
  t.same(refused.log, ['connecting', 'closed', 'client error (fatal TOWER_SSE_CLIENT_FATAL)'], 'no `end`: a fatal error')
  t.match(stranger.state, { kind: 'closed', error: { status: 404, fatal: true } })
  t.equal(refused.clientErrors[0].status, 404)
  await reconnectWindow()
  t.equal(server.requests.length, 3, 'neither the 204 nor the 404 is asked again')
})

t.test('a log expired: `resync`, then `end` with the end\'s id; the client ends and never asks again', async (t) => {
  const server = await startAnswers(t, { ttlMs: 50 })
  const first = ask(`${server.base}/answer`)
  const firstSeen = watch(first)
  await waitFor('the first answer to end', () => first.readyState === TowerSseClient.CLOSED)
  const midId = firstSeen.messages[2].lastEventId
  // The log lives ttlMs after its end (its own timer): well past it, it is gone.
  await new Promise((resolve) => setTimeout(resolve, 300))

  const late = ask(`${server.base}/answer`, { lastEventId: midId })
  t.teardown(() => late.close())
  const seen = watch(late, ['resync'])
  await waitFor('the late client to close', () => late.readyState === TowerSseClient.CLOSED)
  t.same(seen.log, ['connecting', 'resync:{"reason":"expired"}', 'end:{"reason":"expired"}', 'closed'])
  t.equal(late.lastEventId, first.lastEventId, 'the end\'s id, as the first client\'s end carried')
  t.same(late.state, { kind: 'closed', error: null })
  await reconnectWindow()
  t.same(server.requests.slice(1).map((r) => r.lastEventId), [midId], 'not asked again')
})

t.test('the plugin\'s own `event: error` stops the client for good with its code; an app\'s `error` event does not', async (t) => {
  const server = await startAnswers(t)
  for (const [name, open] of [
    ['resumable', () => ask(`${server.base}/fails`)],
    ['per-request', () => new TowerSseClient(`${server.base}/fails-plain`, { retryMs: 20, minRetryMs: 0, backoffBaseMs: 20, backoffCapMs: 40 })]
  ] as const) {
    const client = open()
    t.teardown(() => client.close())
    const seen = watch(client)
    const iterated: string[] = []
    const iteration = (async () => { for await (const message of client) iterated.push(`${message.type}:${message.data}`) })()
    await t.rejects(iteration, { name: 'TowerSseClientError', code: 'TOWER_SSE_CLIENT_SERVER_ERROR', serverCode: 'TOWER_SSE_STREAM_FAILED', fatal: true },
      `${name}: the iterator throws the fatal error`)
    t.same(iterated, ['message:token 0', 'message:token 1', 'error:{"code":"TOWER_SSE_STREAM_FAILED"}'], `${name}: after the events before it, the server's error included`)
    t.same(seen.log, ['connecting', 'token 0', 'token 1', 'error:{"code":"TOWER_SSE_STREAM_FAILED"}', 'closed', 'client error (fatal TOWER_SSE_CLIENT_SERVER_ERROR)'],
      `${name}: the server's error as a MessageEvent, then closed with the client's fatal one`)
    t.match(client.state, { kind: 'closed', error: { code: 'TOWER_SSE_CLIENT_SERVER_ERROR', serverCode: 'TOWER_SSE_STREAM_FAILED', fatal: true, status: 200 } })
    t.equal(seen.clientErrors[0].serverCode, 'TOWER_SSE_STREAM_FAILED')
    t.same(seen.ends, [], `${name}: no \`end\`: the answer failed`)
  }
  await reconnectWindow()
  t.same(server.requests.map((r) => r.url), ['/fails', '/fails-plain'], 'neither failed answer is asked again')

  const listener = new TowerSseClient(`${server.base}/events`, { retryMs: 20, minRetryMs: 0 })
  t.teardown(() => listener.close())
  const seen = watch(listener)
  await waitFor('the broadcast stream', () => listener.readyState === TowerSseClient.OPEN)
  server.app.sse.broadcast({ reason: 'the app\'s own' }, { event: 'error' })
  server.app.sse.broadcast({ code: 'E_QUOTA' }, { event: 'error' })
  server.app.sse.broadcast('still here')
  await waitFor('the message after them', () => seen.messages.length === 1)
  t.same(seen.log, ['connecting', 'error:{"reason":"the app\'s own"}', 'error:{"code":"E_QUOTA"}', 'still here'], 'an app\'s `error` events are named events like any other')
  t.equal(listener.readyState, TowerSseClient.OPEN, 'still open')
  t.same(seen.clientErrors, [])
})

t.test('after `end` the client reads on until the server closes (the server closes first); what follows is dropped', async (t) => {
  const order: string[] = []
  let finish: (() => void) | null = null
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    socket.once('data', () => {
      // Delimited by the close, as the plugin's streams are.
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: a\n\nevent: end\ndata: {}\n\n')
      finish = () => {
        order.push('server closed')
        socket.end('data: after the end\n\n')
      }
    })
    socket.once('end', () => {
      order.push('client closed')
      socket.end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const client = new TowerSseClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}/answer`)
  t.teardown(() => client.close())
  const seen = watch(client)
  await waitFor('the end', () => client.readyState === TowerSseClient.CLOSED && finish !== null)
  // A client that let go at the end would close its side now.
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.same(order, [], 'closed, yet the client still reads the response')
  ;(finish as unknown as () => void)()
  await waitFor('both sides closed', () => order.length === 2)
  t.same(order, ['server closed', 'client closed'], 'the server closed first')
  t.same(seen.log, ['connecting', 'a', 'end:{}', 'closed'], 'nothing after the end is delivered')
})

t.test('a server that keeps writing after `end` is let go once the bounds are passed (no connection held forever)', async (t) => {
  let clientClosed = false
  const sockets = new Set<Socket>()
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket)
    socket.once('data', () => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\nevent: end\ndata: {}\n\n')
      // 128 KiB of comments, then held open: more than the client reads after the end.
      socket.write(`: ${'x'.repeat(1022)}\n`.repeat(128))
    })
    socket.on('error', () => {})
    // The client's FIN (or a reset): it let go.
    const closed = (): void => {
      clientClosed = true
      socket.destroy()
    }
    socket.once('end', closed)
    socket.once('close', closed)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  // Undici's spare connection after a cancelled stream (nodejs/undici#5845) is closed at once too.
  t.teardown(() => new Promise<void>((resolve) => {
    for (const socket of sockets) socket.destroy()
    server.close(() => resolve())
  }))
  const client = new TowerSseClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}/answer`)
  t.teardown(() => client.close())
  const seen = watch(client)
  await waitFor('the client to let go of the connection', () => clientClosed, 10_000)
  t.same(seen.log, ['connecting', 'end:{}', 'closed'])
})
