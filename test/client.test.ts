import { withTestClocks } from '../lib/testing'
import net from 'node:net'
import t from 'tap'
import { TowerSseClient, TowerSseErrorEvent, type TowerSseClientError, type TowerSseClientState } from '../lib/client'
import { backoffDelayMs } from '../lib/shared/backoff'
import { startApp } from './fixtures/app'
import { seededRandom } from './fixtures/client-seeded-random'
import { startScriptedServer } from './fixtures/client-scripted-server'
import { connect, waitFor } from './fixtures/sse-connection'

interface Timeline {
  states: Array<{ at: number, state: TowerSseClientState }>
  of: <K extends TowerSseClientState['kind']>(kind: K) => Array<{ at: number, state: Extract<TowerSseClientState, { kind: K }> }>
}

/** Every state the client goes through, with the time it entered it. */
function recordStates (client: TowerSseClient): Timeline {
  const states: Timeline['states'] = []
  client.addEventListener('statechange', (event) => states.push({ at: Date.now(), state: event.state }))
  return {
    states,
    of: <K extends TowerSseClientState['kind']>(kind: K) =>
      states.filter((s) => s.state.kind === kind) as Array<{ at: number, state: Extract<TowerSseClientState, { kind: K }> }>
  }
}

/**
 * Node 20's undici opens one spare, unref'd connection when a streaming fetch is aborted
 * (nodejs/undici#5845); it carries no request and closes after ~4 s. Servers of tests that abort
 * streams close it at once instead of waiting for it.
 */
const UNDICI_SPARE = { forceCloseConnections: true }

/** How many resources of one type keep the event loop alive (Timeout, TCPSocketWrap, …). */
function activeCount (type: string): number {
  return process.getActiveResourcesInfo().filter((name) => name === type).length
}

t.test('server full: one attempt per Retry-After window (+ jitter), then connects once a slot frees', async (t) => {
  // The server's own draw at 0: every refusal says exactly `Retry-After: 1`.
  const { app, port } = await startApp(withTestClocks({ maxClients: 1, retryAfterSeconds: 1, heartbeatMs: 60_000 }, { random: () => 0 }))
  t.teardown(() => app.close())
  const holder = await connect(port)
  const client = new TowerSseClient(`http://127.0.0.1:${port}/api/events`, { random: seededRandom(3), retryAfterJitterRatio: 0.5 })
  t.teardown(() => client.close())
  const timeline = recordStates(client)
  await waitFor('three refusals', () => timeline.of('waiting').length >= 3, 15_000)
  holder.destroy()
  await waitFor('the client to get the freed slot', () => client.readyState === TowerSseClient.OPEN, 10_000)

  const waits = timeline.of('waiting').map((w) => w.state)
  t.ok(waits.every((w) => w.reason === 'refused' && w.status === 503), 'every wait is a 503 refusal')
  t.ok(waits.every((w) => w.delayMs >= 1000 && w.delayMs <= 1500), `each wait is Retry-After × [1, 1.5]: ${waits.map((w) => w.delayMs).join(', ')} ms`)
  t.ok(new Set(waits.map((w) => w.delayMs)).size > 1, 'jittered: not one constant delay')
  const attempts = timeline.of('connecting').map((c) => c.at)
  const gaps = attempts.slice(1).map((at, i) => at - attempts[i])
  t.ok(gaps.every((gap) => gap >= 1000), `never two attempts within one Retry-After window: gaps ${gaps.join(', ')} ms`)
  t.equal(attempts.length, waits.length + 1, 'every refusal, then the attempt that got the slot')
  t.equal(app.sse.stats().rejected, waits.length, 'the server saw exactly the refused attempts, no hidden retries')
  t.equal(app.sse.size, 1)
  t.same(waits.map((w) => w.failures), waits.map((_, i) => i + 1), 'each refusal counts as a failure')
})

t.test('rejectWith "retry": the client tells the refusal stream from an expiry and still gets in', async (t) => {
  const { app, port } = await startApp(withTestClocks({ maxClients: 1, rejectWith: 'retry', retryAfterSeconds: 1, heartbeatMs: 60_000 }, { random: () => 0 }))
  t.teardown(() => app.close())
  const holder = await connect(port)
  const client = new TowerSseClient(`http://127.0.0.1:${port}/api/events`, { random: seededRandom(5) })
  t.teardown(() => client.close())
  const timeline = recordStates(client)
  await waitFor('two refusals', () => timeline.of('waiting').length >= 2, 10_000)
  holder.destroy()
  await waitFor('the client to get the freed slot', () => app.sse.size === 1 && client.readyState === TowerSseClient.OPEN, 10_000)
  const waits = timeline.of('waiting').map((w) => w.state)
  t.ok(waits.every((w) => w.reason === 'refused'), `every wait is named a refusal: ${waits.map((w) => w.reason).join(', ')}`)
  t.ok(waits.every((w) => w.delayMs >= 500), `and honours the retry: it was given (${waits.map((w) => w.delayMs).join(', ')} ms)`)
  t.same(waits.map((w) => w.failures), waits.map((_, i) => i + 1), 'each refusal counts as a failure')
})

t.test('after max-age expiry: reconnects after retry: and misses no event (Last-Event-ID replay)', async (t) => {
  // The server's draws at their middle: every max age exactly 300 ms, every retry: exactly 150.
  const { app, port } = await startApp(withTestClocks({ maxAgeMs: 300, retryMs: 150, heartbeatMs: 60_000 }, { random: () => 0.5 }))
  t.teardown(() => app.close())
  const client = new TowerSseClient(`http://127.0.0.1:${port}/api/events`, { random: seededRandom(5), retryJitterRatio: 0.2, minRetryMs: 100 })
  t.teardown(() => client.close())
  const timeline = recordStates(client)
  const received: number[] = []
  client.addEventListener('message', (event) => received.push(JSON.parse(event.data).n))
  await waitFor('the first stream', () => client.readyState === TowerSseClient.OPEN)

  // Broadcast through two expiries, including the gaps in which the client is reconnecting.
  let sent = 0
  const deadline = Date.now() + 10_000
  while (timeline.of('open').length < 3 && Date.now() < deadline) {
    app.sse.broadcast({ n: sent++ })
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  for (let i = 0; i < 5; i++) app.sse.broadcast({ n: sent++ })
  await waitFor('every broadcast to arrive', () => received.length >= sent, 10_000)

  t.ok(timeline.of('open').length >= 3, 'two expiries, two reconnects')
  t.ok(app.sse.stats().expired >= 2, 'the server ended the streams (max age)')
  t.same(received, Array.from({ length: sent }, (_, n) => n), `all ${sent} events, in order, none missed, none twice`)
  const ends = timeline.states.filter((s) => s.state.kind === 'waiting')
  for (const end of ends) {
    const wait = end.state as Extract<TowerSseClientState, { kind: 'waiting' }>
    t.equal(wait.reason, 'stream-ended')
    t.ok(wait.delayMs >= 150 && wait.delayMs <= 180, `waits retry: × [1, 1.2]: ${wait.delayMs} ms`)
    const next = timeline.states.find((s) => s.at >= end.at && s.state.kind === 'connecting')
    // It did wait (a client that skipped the wait reconnects within a few ms). Not the whole delay:
    // a timer counts from libuv's cached loop time, which on a busy machine is behind Date.now()
    // when the timer is set, so a wall-clock gap can read shorter than the delay.
    t.ok(next !== undefined && next.at - end.at >= wait.delayMs / 2, `and waited (${next === undefined ? 'never' : next.at - end.at} ms of ${wait.delayMs})`)
  }
  t.equal(client.lastEventId, app.sse.lastEventId, 'the client holds the newest id')
})

t.test('close() during a wait leaves no timer and no socket; close() on an open stream frees the slot', async (t) => {
  const { app, port } = await startApp({ maxClients: 1, retryAfterSeconds: 30, heartbeatMs: 60_000 }, UNDICI_SPARE)
  t.teardown(() => app.close())
  const holder = await connect(port)
  const url = `http://127.0.0.1:${port}/api/events`
  const before = { timers: activeCount('Timeout'), sockets: activeCount('TCPSocketWrap') }

  const waiting = new TowerSseClient(url)
  await waitFor('the refusal', () => waiting.state.kind === 'waiting')
  t.equal(activeCount('Timeout'), before.timers + 1, 'the retry timer is what keeps the client alive while it waits')
  waiting.close()
  await waitFor('the refused socket to close', () => activeCount('TCPSocketWrap') === before.sockets)
  t.equal(activeCount('Timeout'), before.timers, 'close() cancelled the retry timer')
  t.same(waiting.state, { kind: 'closed', error: null })
  t.equal(waiting.readyState, TowerSseClient.CLOSED)
  const connections = await new Promise<number>((resolve, reject) => app.server.getConnections((e, n) => e ? reject(e) : resolve(n)))
  t.equal(connections, 1, 'the server holds only the other stream')
  t.equal(app.sse.stats().rejected, 1, 'one attempt, no retry after close()')

  holder.destroy()
  await waitFor('the slot to free', () => app.sse.size === 0)
  let requests = 0
  app.server.on('request', () => requests++)
  const open = new TowerSseClient(url)
  await waitFor('the stream', () => open.readyState === TowerSseClient.OPEN)
  t.equal(app.sse.size, 1)
  open.close()
  await waitFor('the server to see the disconnect', () => app.sse.size === 0)
  t.equal(activeCount('Timeout'), before.timers, 'no timer left')
  // The spare connection undici opens here (see UNDICI_SPARE) carries no request. What matters:
  // no request after close(), and nothing of the client's keeps the process alive: with no timer
  // left, nothing can make one later.
  t.equal(requests, 1, 'no request after close()')
  open.close()
  t.same(open.state, { kind: 'closed', error: null }, 'a second close() changes nothing')
})

t.test('204: the answer is complete: an `end` Event, closed with no error, no retry', async (t) => {
  const server = await startScriptedServer(() => ({ status: 204 }))
  t.teardown(() => server.close())
  const timers = activeCount('Timeout')
  const client = new TowerSseClient(server.url, { backoffBaseMs: 10, backoffCapMs: 10 })
  const seen: string[] = []
  const ends: Event[] = []
  client.addEventListener('error', () => seen.push('error'))
  client.addEventListener('end', (event) => {
    ends.push(event)
    seen.push(`end (readyState ${client.readyState})`)
  })
  client.addEventListener('statechange', (event) => seen.push(event.state.kind))
  const iterated: string[] = []
  for await (const event of client) iterated.push(event.type)
  t.same(seen, ['connecting', 'end (readyState 0)', 'closed'], 'end, then closed; no error event')
  t.equal(ends.length, 1)
  t.notOk(ends[0] instanceof MessageEvent, 'a plain Event: a 204 carries no data')
  t.same(client.state, { kind: 'closed', error: null })
  t.equal(client.readyState, TowerSseClient.CLOSED)
  t.same(iterated, [], 'the iterator ends without an event and without throwing')
  t.equal(activeCount('Timeout'), timers, 'no retry scheduled')
  t.equal(server.requests.length, 1, 'no second attempt')
})

t.test('404 and a non-SSE 200 stop for good with a clear error', async (t) => {
  const cases: Array<{ status: number, headers: Record<string, string>, message: RegExp }> = [
    { status: 404, headers: { 'content-type': 'application/json' }, message: /HTTP 404, which reconnecting cannot fix/ },
    { status: 200, headers: { 'content-type': 'text/html' }, message: /expected a text\/event-stream response, got content-type "text\/html"/ }
  ]
  for (const { status, headers, message } of cases) {
    const server = await startScriptedServer(() => ({ status, headers, body: '{}' }))
    const timers = activeCount('Timeout')
    const client = new TowerSseClient(server.url, { backoffBaseMs: 10, backoffCapMs: 10 })
    const errors: TowerSseClientError[] = []
    client.addEventListener('error', (event) => { if (event instanceof TowerSseErrorEvent) errors.push(event.error) })
    const iteration = (async () => { for await (const event of client) t.fail(`no event expected, got ${event.type}`) })()
    await t.rejects(iteration, { name: 'TowerSseClientError', code: 'TOWER_SSE_CLIENT_FATAL', message }, `${status}: the iterator throws the fatal error`)
    t.equal(client.readyState, TowerSseClient.CLOSED)
    t.match(client.state, { kind: 'closed', error: { status, fatal: true, message } })
    t.equal(errors.length, 1)
    t.equal(errors[0].fatal, true)
    // A retry would be a timer (10 ms backoff): none is left, so none can come.
    t.equal(activeCount('Timeout'), timers, `${status}: no retry scheduled`)
    t.equal(server.requests.length, 1, `${status}: no second attempt`)
    await server.close()
  }
  const { app, port } = await startApp({})
  t.teardown(() => app.close())
  const client = new TowerSseClient(`http://127.0.0.1:${port}/no-such-route`)
  await waitFor('the client to stop', () => client.readyState === TowerSseClient.CLOSED)
  t.match(client.state, { kind: 'closed', error: { status: 404, fatal: true } }, 'the plugin app: an unknown path stops for good')
})

t.test('429 Retry-After, 500 backoff, Last-Event-ID on reconnect, resync as its own event', async (t) => {
  const steps = [
    { status: 429, headers: { 'retry-after': '1' } },
    { status: 500 },
    { frames: ['retry: 40\n\n', 'id: 7\ndata: a\n\n', 'event: resync\nid: 9\ndata: {"reason":"too-old"}\n\n'], then: 'end' as const },
    { frames: ['data: b\n\n'], then: 'hold' as const }
  ]
  const server = await startScriptedServer((i) => steps[Math.min(i, steps.length - 1)])
  t.teardown(() => server.close())
  const client = new TowerSseClient(server.url, {
    random: seededRandom(9), backoffBaseMs: 50, backoffCapMs: 100, minRetryMs: 0, lastEventId: '3', headers: { authorization: 'Bearer t' }
  })
  t.teardown(() => client.close())
  const timeline = recordStates(client)
  const messages: string[] = []
  const resyncs: MessageEvent<string>[] = []
  client.addEventListener('message', (event) => messages.push(event.data))
  client.addEventListener('resync', (event) => resyncs.push(event))
  await waitFor('the second stream', () => messages.includes('b'), 10_000)

  const [refused, failed, ended] = timeline.of('waiting').map((w) => w.state)
  t.match(refused, { reason: 'refused', status: 429, failures: 1 })
  t.ok(refused.delayMs >= 1000 && refused.delayMs <= 1500, `429 waits its Retry-After: ${refused.delayMs} ms`)
  t.match(failed, { reason: 'server-error', status: 500, failures: 2 })
  t.ok(failed.delayMs < 100, `500 backs off within [0, min(cap, 2 × base)): ${failed.delayMs} ms`)
  t.match(ended, { reason: 'stream-ended', status: null, failures: 2 }, 'a 200 does not reset the failure count')
  t.ok(ended.delayMs >= 40 && ended.delayMs <= 48, `then the server's retry: 40 (+ jitter): ${ended.delayMs} ms`)
  t.ok(server.requests[1].at - server.requests[0].at >= 1000, 'no attempt inside the Retry-After window')

  const sent = server.requests.map((r) => r.headers['last-event-id'])
  t.same(sent, ['3', '3', '3', '9'], 'Last-Event-ID: the option until an id arrives, then the newest id')
  t.equal(server.requests[0].headers.accept, 'text/event-stream')
  t.equal(server.requests[0].headers.authorization, 'Bearer t', 'custom headers are sent')
  t.same(messages, ['a', 'b'], 'resync is not a message')
  t.equal(resyncs.length, 1)
  t.equal(resyncs[0].lastEventId, '9')
  t.same(JSON.parse(resyncs[0].data), { reason: 'too-old' })
})

t.test('Retry-After: 0 or a date already past is no reason to come back at once: the refusal backs off', async (t) => {
  const past = 'Wed, 21 Oct 2015 07:28:00 GMT'
  const steps = [{ status: 503, headers: { 'retry-after': '0' } }, { status: 429, headers: { 'retry-after': past } }]
  const server = await startScriptedServer((i) => steps[i] ?? { frames: [], then: 'hold' as const })
  t.teardown(() => server.close())
  const random = (): number => 0.5
  const client = new TowerSseClient(server.url, { random, backoffBaseMs: 40, backoffCapMs: 1000 })
  t.teardown(() => client.close())
  const timeline = recordStates(client)
  await waitFor('the third attempt to open', () => client.readyState === TowerSseClient.OPEN, 10_000)
  const waits = timeline.of('waiting').map((w) => w.state)
  t.same(waits.map((w) => [w.reason, w.status, w.delayMs]), [
    ['refused', 503, backoffDelayMs(1, random, 40, 1000)],
    ['refused', 429, backoffDelayMs(2, random, 40, 1000)]
  ], 'each waits the backoff of its failure count, never 0 ms')
  t.ok(waits.every((w) => w.delayMs > 0))
})

t.test('a first 200 is not health: the failure count resets only after healthyAfterMs open', async (t) => {
  // Three streams broken at once, one broken after 600 ms (healthy at 500 ms), then one held.
  const server = await startScriptedServer((i) => i < 3
    ? { frames: ['retry: 5\n\n'], then: 'destroy' }
    : i === 3 ? { frames: ['retry: 5\n\n'], then: 'destroy', afterMs: 600 } : { frames: [], then: 'hold' })
  t.teardown(() => server.close())
  const client = new TowerSseClient(server.url, { random: seededRandom(2), backoffBaseMs: 10, backoffCapMs: 80, healthyAfterMs: 500, minRetryMs: 0 })
  t.teardown(() => client.close())
  const timeline = recordStates(client)
  const errors: TowerSseClientError[] = []
  client.addEventListener('error', (event) => { if (event instanceof TowerSseErrorEvent) errors.push(event.error) })
  await waitFor('the fifth stream', () => server.requests.length === 5 && client.readyState === TowerSseClient.OPEN, 10_000)
  const waits = timeline.of('waiting').map((w) => w.state)
  t.same(waits.map((w) => w.reason), ['network-error', 'network-error', 'network-error', 'network-error'])
  t.same(waits.map((w) => w.failures), [1, 2, 3, 1], 'grows across quick 200s, restarts after a healthy stream')
  t.ok(waits.every((w) => w.delayMs >= 5 && w.delayMs < 80), `max(retry:, backoff) within the cap: ${waits.map((w) => w.delayMs).join(', ')}`)
  t.equal(errors.length, 4)
  t.ok(errors.every((e) => !e.fatal && e.status === null && e.code === 'TOWER_SSE_CLIENT_NETWORK'))
  t.equal(timeline.of('open').length, 5, 'open fired for every stream')
})

t.test('a network error backs off; the async iterator yields events until close()', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000 }, UNDICI_SPARE)
  t.teardown(() => app.close())
  const closedPort = await new Promise<number>((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo
      probe.close(() => resolve(port))
    })
  })
  const refused = new TowerSseClient(`http://127.0.0.1:${closedPort}/api/events`, { random: () => 0.5, backoffBaseMs: 400 })
  const errors: TowerSseClientError[] = []
  refused.addEventListener('error', (event) => { if (event instanceof TowerSseErrorEvent) errors.push(event.error) })
  await waitFor('the connection error', () => refused.state.kind === 'waiting')
  t.match(refused.state, { kind: 'waiting', reason: 'network-error', status: null, delayMs: 200, failures: 1 })
  t.match(errors[0], { fatal: false, status: null, message: /could not connect: fetch failed \(ECONNREFUSED\)/ })
  refused.close()

  const client = new TowerSseClient(`http://127.0.0.1:${port}/api/events`)
  const opened = new Promise((resolve) => client.addEventListener('open', resolve, { once: true }))
  const received: string[] = []
  const iteration = (async () => {
    for await (const message of client) {
      received.push(`${message.type}:${message.data}`)
      if (received.length === 3) client.close()
    }
  })()
  await opened
  app.sse.broadcast('one')
  app.sse.broadcast({ two: 2 }, { event: 'update' })
  app.sse.broadcast('three')
  app.sse.broadcast('never seen')
  await iteration
  t.same(received, ['message:one', 'update:{"two":2}', 'message:three'], 'named events keep their type; iteration ends on close()')
  // Leaving a for-await early closes the client, as it destroys a Node stream (client-request.test.ts
  // shows the process then exits by itself).
  const second = new TowerSseClient(`http://127.0.0.1:${port}/api/events`)
  t.teardown(() => second.close())
  await new Promise((resolve) => second.addEventListener('open', resolve, { once: true }))
  const firstOnly = (async () => {
    // eslint-disable-next-line no-unreachable-loop -- leaving the loop at the first message is what is tested
    for await (const message of second) return message.data
  })()
  app.sse.broadcast('first')
  t.equal(await firstOnly, 'first')
  t.equal(second.readyState, TowerSseClient.CLOSED, 'breaking out of the loop closes the client')
  await waitFor('the server to see the stream end', () => app.sse.size === 0)

  const early = new TowerSseClient(`http://127.0.0.1:${port}/api/events`)
  early.close()
  const after = await early[Symbol.asyncIterator]().next()
  t.same(after, { value: undefined, done: true }, 'iterating a closed client ends at once')
})

t.test('an injected fetch is used for every attempt; close() while its response is on the way releases it', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000 }, UNDICI_SPARE)
  t.teardown(() => app.close())
  let calls = 0
  const client: TowerSseClient = new TowerSseClient(`http://127.0.0.1:${port}/api/events`, {
    fetch: async (input, init) => {
      calls++
      const response = await fetch(input, init)
      client.close()
      return response
    }
  })
  await waitFor('the client to close', () => client.readyState === TowerSseClient.CLOSED)
  await waitFor('the server to see the stream released', () => app.sse.stats().disconnected === 1)
  t.equal(calls, 1)
  t.equal(app.sse.size, 0)
  t.same(client.state, { kind: 'closed', error: null }, 'never reported open')
})

t.test('minRetryMs: a server sending retry: 0 cannot make the client reconnect in a loop', async (t) => {
  const server = await startScriptedServer(() => ({ frames: ['retry: 0\n\n', 'data: x\n\n'], then: 'end' }))
  t.teardown(() => server.close())
  const client = new TowerSseClient(server.url, { minRetryMs: 300, retryJitterRatio: 0 })
  t.teardown(() => client.close())
  const timeline = recordStates(client)
  await waitFor('the second request', () => server.requests.length === 2)
  const [ended] = timeline.of('waiting')
  t.match(ended.state, { reason: 'stream-ended', delayMs: 300 }, 'waits minRetryMs, not 0')
  // Half the floor: a timer counts from libuv's cached loop time, which a busy machine leaves behind
  // Date.now() (a client honouring retry: 0 asks again within a few ms).
  t.ok(server.requests[1].at - ended.at >= 150, `no second request within the floor (${server.requests[1].at - ended.at} ms)`)
})

t.test('a refusal is read to its end: the server\'s FIN comes first and the client waits only after it', async (t) => {
  const order: string[] = []
  let endBody: (() => void) | null = null
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    socket.once('data', () => {
      // No length: the body runs until the server closes, as the plugin's refusals do.
      socket.write('HTTP/1.1 503 Service Unavailable\r\nretry-after: 30\r\nconnection: close\r\ncontent-type: application/json\r\n\r\n{"reason":')
      endBody = () => {
        order.push('server closed')
        socket.end('"capacity"}')
      }
    })
    socket.once('end', () => {
      order.push('client closed')
      socket.end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const client = new TowerSseClient(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}/events`)
  t.teardown(() => client.close())
  client.addEventListener('statechange', (event) => { if (event.state.kind === 'waiting') order.push('client waiting') })
  await waitFor('the refusal\'s first bytes', () => endBody !== null)
  // The body stays open a while: a client that dropped it would close its side, or wait, now.
  await new Promise((resolve) => setTimeout(resolve, 300))
  ;(endBody as unknown as () => void)()
  await waitFor('the client to close its side and wait', () => order.length === 3)
  t.equal(order[0], 'server closed', `the server closed first and the client waited after it: ${order.join(', ')}`)
  t.match(client.state, { kind: 'waiting', reason: 'refused' })
})
