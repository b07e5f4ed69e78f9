import { subscriberOn } from './fixtures/streams'
import http from 'node:http'
import type net from 'node:net'
import t from 'tap'
import { Subscriber } from '../lib/streams/subscriber'
import type { CloseReason } from '../lib/observe/vocabulary'
import { encodeEvent } from '../lib/events/encoder'
import { queryTopicsOrAll, startApp } from './fixtures/app'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

// Writes to one stream within one turn of the event loop go to its socket as one write. These
// tests count the calls Node's net.Socket makes to its own _write/_writev (each is one write to
// the kernel) on the server's real sockets, and read what real clients receive.

interface SocketWrites {
  /** Writes the server's socket for this connection handed down so far. */
  count: (conn: SseConnection) => number
  /** The data of its latest write, if that was one chunk. */
  last: (conn: SseConnection) => unknown
}

/** Watches the server's real sockets: per client port, how many writes each made, and the last. */
function watchSocketWrites (server: http.Server): SocketWrites {
  const counts = new Map<number, number>()
  const lasts = new Map<number, unknown>()
  server.on('connection', (socket: net.Socket) => {
    const port = socket.remotePort as number
    counts.set(port, 0)
    const seen = (chunk: unknown): void => {
      counts.set(port, (counts.get(port) ?? 0) + 1)
      lasts.set(port, chunk)
    }
    const { _write, _writev } = socket
    socket._write = function (...args: Parameters<net.Socket['_write']>) {
      seen(args[0])
      return _write.apply(this, args)
    }
    socket._writev = function (...args: Parameters<NonNullable<net.Socket['_writev']>>) {
      seen(args[0])
      return (_writev as NonNullable<net.Socket['_writev']>).apply(this, args)
    }
  })
  const port = (conn: SseConnection): number => conn.request.socket?.localPort as number
  return { count: (conn) => counts.get(port(conn)) ?? -1, last: (conn) => lasts.get(port(conn)) }
}

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))
const numbers = (conn: SseConnection): number[] => conn.events.map((e) => (JSON.parse(e.data) as { n: number }).n)

t.test('a burst of 50 events broadcast from 50 separate callbacks is one socket write per stream, in order', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const writes = watchSocketWrites(app.server)
  const conns = [await connect(port), await connect(port), await connect(port)]
  await waitFor('3 streams and their retry: frames', () => app.sse.size === 3 && conns.every((c) => c.retries.length === 1))
  await turn()
  const before = conns.map(writes.count)
  // Each broadcast in its own callback, as 50 notify requests parsed in one poll phase: Node runs
  // process.nextTick and microtasks between them, so only a flush after the phase joins them.
  const delivered: number[] = []
  for (let n = 0; n < 50; n++) setImmediate(() => { void app.sse.broadcast({ n }).then((result) => delivered.push(result.delivered)) })
  await waitFor('50 events on every stream', () => conns.every((c) => c.events.length === 50))
  t.same(delivered, Array(50).fill(3), 'each broadcast was queued for all 3 streams')
  t.same(conns.map((c, i) => writes.count(c) - before[i]), [1, 1, 1], 'one socket write per stream for the whole burst')
  t.equal(new Set(conns.map(writes.last)).size, 1, 'the three streams were handed one shared Buffer, not a copy each')
  for (const c of conns) t.same(numbers(c), Array.from({ length: 50 }, (_, n) => n), 'every event once, in order')
  for (const c of conns) c.destroy()
})

t.test('streams with different topics each get their own events of a burst, once and in order', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000, topicsFromRequest: queryTopicsOrAll })
  t.teardown(() => app.close())
  // Flushed in this order, so a stream's frames are compared with a different stream's just before.
  const conns = [await connect(port, '/api/events?topics=a'), await connect(port, '/api/events?topics=b'), await connect(port), await connect(port, '/api/events?topics=a')]
  await waitFor('4 streams', () => app.sse.size === 4 && conns.every((c) => c.retries.length === 1))
  // As many events for a as for b: a join is reused only for the very same frames, not the same count.
  for (let n = 0; n < 30; n++) setImmediate(() => app.sse.broadcast({ n }, { topic: n % 2 === 0 ? 'a' : 'b' }))
  const all = Array.from({ length: 30 }, (_, n) => n)
  const expected = [all.filter((n) => n % 2 === 0), all.filter((n) => n % 2 === 1), all, all.filter((n) => n % 2 === 0)]
  await waitFor('every stream its events', () => conns.every((c, i) => c.events.length === expected[i].length))
  t.same(conns.map(numbers), expected)
  // Then a burst after which a's and b's streams differ in the last frame only.
  for (let n = 30; n < 35; n++) setImmediate(() => app.sse.broadcast({ n }))
  setImmediate(() => app.sse.broadcast({ n: 35 }, { topic: 'a' }))
  setImmediate(() => app.sse.broadcast({ n: 36 }, { topic: 'b' }))
  const tail = [[30, 31, 32, 33, 34, 35], [30, 31, 32, 33, 34, 36], [30, 31, 32, 33, 34, 35, 36], [30, 31, 32, 33, 34, 35]]
  await waitFor('the second burst', () => conns.every((c, i) => c.events.length === expected[i].length + tail[i].length))
  t.same(conns.map((c, i) => numbers(c).slice(expected[i].length)), tail)
  for (const c of conns) c.destroy()
})

t.test('a lone event is written to the socket in the turn it was broadcast in', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const writes = watchSocketWrites(app.server)
  const conn = await connect(port)
  await waitFor('the stream and its retry: frame', () => app.sse.size === 1 && conn.retries.length === 1)
  await turn()
  const before = writes.count(conn)
  // From a timer, like a heartbeat or a scheduled notification; the marker is queued after the
  // broadcast, so it runs at the end of the same turn — a flush on a timer would come after it.
  const writesAtMarker = await new Promise<number>((resolve) => setTimeout(() => {
    app.sse.broadcast({ n: 1 })
    setImmediate(() => resolve(writes.count(conn)))
  }, 1))
  t.equal(writesAtMarker - before, 1, 'the socket had its write before the turn ended')
  await waitFor('the event', () => conn.events.length === 1)
  t.same(numbers(conn), [1])
  conn.destroy()
})

t.test('the byte budget counts what the turn queued: a burst past it drops the stream at the budget', async (t) => {
  const budget = 10 * 1024
  const { app, port } = await startApp({ maxBufferedBytes: budget, heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const conn = await connect(port)
  await waitFor('the stream and its retry: frame', () => app.sse.size === 1 && conn.retries.length === 1)
  await turn()
  const data = 'b'.repeat(1000)
  // Nothing reaches the socket inside one synchronous loop: only the queued bytes can pass the budget.
  const results = await Promise.all(Array.from({ length: 20 }, () => app.sse.broadcast(data)))
  const delivered = results.map((result) => result.delivered)
  const frameBytes = encodeEvent({ id: results[0].id, data }).length
  const fits = Math.floor(budget / frameBytes)
  t.same(delivered, [...Array(fits).fill(1), ...Array(20 - fits).fill(0)], `${fits} frames of ${frameBytes} bytes fit, the next one drops it`)
  t.equal(app.sse.stats().dropped, 1)
  t.equal(app.sse.size, 0)
  await conn.ended
  t.equal(conn.events.length, 0, 'a dropped stream gets none of what it had queued')
})

t.test('bursts arrive once and in order across expiries and Last-Event-ID replays', async (t) => {
  const { app, port } = await startApp({ maxAgeMs: 120, heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const received: number[] = []
  let stop = false
  let lastEventId: string | undefined
  let connections = 0
  // The client reconnects at once, with the id of the last event it read.
  const follow = (async () => {
    while (!stop) {
      let conn: SseConnection
      try {
        conn = await connect(port, '/api/events', lastEventId === undefined ? {} : { 'last-event-id': lastEventId })
      } catch (error) {
        if (stop) return // the server closed while this reconnect was on its way
        throw error
      }
      connections++
      let seen = 0
      const take = (): void => {
        for (; seen < conn.events.length; seen++) {
          received.push((JSON.parse(conn.events[seen].data) as { n: number }).n)
          lastEventId = conn.events[seen].id
        }
      }
      conn.response.on('data', take)
      await conn.ended
      take()
      conn.destroy()
    }
  })()
  await waitFor('the first stream', () => app.sse.size === 1)
  // Bursts of 10, each event from its own callback, until the stream has expired at least 3 times.
  let n = 0
  while (app.sse.stats().expired < 3) {
    for (let i = 0; i < 10; i++) setImmediate(() => app.sse.broadcast({ n: n++ }))
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  const sent = n
  await waitFor(`all ${sent} events`, () => received.length >= sent, 10_000)
  stop = true
  await app.close()
  await follow
  t.ok(connections >= 3, `the client read across ${connections} connections, 3 of them expired`)
  t.same(received, Array.from({ length: sent }, (_, i) => i), `${sent} events, each once, in order`)
})

t.test('ending a stream sends what its turn queued before the end (expiry, shutdown)', async (t) => {
  for (const reason of ['expired', 'shutdown'] as const) {
    const server = http.createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    t.teardown(() => server.close())
    const ended: CloseReason[] = []
    const opened = new Promise<Subscriber>((resolve) => server.once('request', (_req, res: http.ServerResponse) => {
      const stream = subscriberOn(res, { maxBufferedBytes: 1 << 20, finished: (_s, why) => ended.push(why) })
      stream.open(200, {}, Buffer.from('retry: 1000\n\n'))
      resolve(stream)
    }))
    const conn = await connect((server.address() as { port: number }).port, '/')
    const stream = await opened
    await waitFor('the retry: frame', () => conn.retries.length === 1)
    for (let n = 0; n < 5; n++) stream.write(encodeEvent({ data: { n } }))
    stream.end(reason)
    await conn.ended
    t.same(numbers(conn), [0, 1, 2, 3, 4], `${reason}: the 5 queued events arrived before the end`)
    t.same(ended, [reason])
    const sent = Buffer.byteLength('retry: 1000\n\n') + [0, 1, 2, 3, 4].reduce((sum, n) => sum + encodeEvent({ data: { n } }).length, 0)
    t.equal(stream.bytesQueued, sent, `${reason}: the bytes the end sent count as sent (stats().bytesSent)`)
    t.equal(stream.write(encodeEvent({ data: 'late' })), false, `${reason}: nothing is queued after the end`)
  }
})

t.test('once its head is out, an HTTP/1 stream\'s frames go to its socket without passing through the response', async (t) => {
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  let responseWrites = 0
  const opened = new Promise<Subscriber>((resolve) => server.once('request', (_req, res: http.ServerResponse) => {
    const write = res.write.bind(res) as (...args: unknown[]) => boolean
    res.write = ((...args: unknown[]) => {
      responseWrites++
      return write(...args)
    }) as typeof res.write
    const stream = subscriberOn(res, { maxBufferedBytes: 1 << 20 })
    stream.open(200, {}, Buffer.from('retry: 1000\n\n'))
    resolve(stream)
  }))
  const conn = await connect((server.address() as { port: number }).port, '/')
  const stream = await opened
  await waitFor('the retry: frame', () => conn.retries.length === 1)
  for (let n = 0; n < 3; n++) {
    stream.write(encodeEvent({ data: { n } }))
    await turn()
  }
  await waitFor('3 events', () => conn.events.length === 3)
  t.same(numbers(conn), [0, 1, 2], 'every frame, in order')
  t.equal(responseWrites, 1, 'the response wrote the head and the first frames, nothing after')
  stream.end('expired')
  await conn.ended
})
