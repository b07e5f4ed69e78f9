import { MAX_STALLED_HEARTBEATS } from '../lib/streams/stream-options'
import { subscriberOn } from './fixtures/streams'
import http from 'node:http'
import v8 from 'node:v8'
import vm from 'node:vm'
import net, { type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { mock } from 'node:test'
import type { CloseReason } from '../lib/observe/vocabulary'
import { Subscriber } from '../lib/streams/subscriber'
import { startApp, type TestApp } from './fixtures/app'
import { connect, rawStream, waitFor, type SseConnection } from './fixtures/sse-connection'

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void

t.test('a client that stops reading is dropped at its budget while 100 others keep receiving', async (t) => {
  const budget = 256 * 1024
  const { app, port } = await startApp({ maxClients: 101, maxBufferedBytes: budget, heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const healthy = Array.from({ length: 100 }, () => rawStream(port))
  const stalled = rawStream(port)
  await waitFor('101 streams', () => app.sse.size === 101 && stalled.received() > 0)
  stalled.socket.pause()
  const baseline = healthy.map((h) => h.received())
  const event = 'e'.repeat(4096)
  let frameBytes = 0
  for (let i = 0; i < 2000; i++) {
    const { delivered } = await app.sse.broadcast(event)
    if (i === 0) frameBytes = Buffer.byteLength(`id: ${app.sse.lastEventId}\ndata: ${event}\n\n`)
    if (delivered < 100) t.fail(`broadcast ${i} reached only ${delivered} clients`)
    if (i % 20 === 19) await new Promise((resolve) => setImmediate(resolve))
  }
  t.equal(app.sse.stats().dropped, 1, 'the stalled client was dropped')
  t.equal(app.sse.size, 100)
  const expected = 2000 * frameBytes
  await waitFor('every healthy client to read all 2000 events', () =>
    healthy.every((h, i) => h.received() - baseline[i] >= expected), 20_000)
  t.pass(`each of the 100 healthy clients read ${(expected / 1e6).toFixed(1)} MB`)
  for (const h of [...healthy, stalled]) h.socket.destroy()
})

t.test('memory stays within the byte budget plus history when a stalled client is sent 50 MB', async (t) => {
  const budget = 1024 * 1024
  const historyBytes = 1024 * 1024
  const { app, port } = await startApp({ maxBufferedBytes: budget, heartbeatMs: 60_000, history: { bytes: historyBytes } })
  t.teardown(() => app.close())
  const stalled = rawStream(port)
  await waitFor('stream open', () => app.sse.size === 1 && stalled.received() > 0)
  stalled.socket.pause()
  gc()
  const before = process.memoryUsage()
  const chunk = 'm'.repeat(64 * 1024)
  let peakExternal = 0
  for (let i = 0; i < 800; i++) {
    app.sse.broadcast(chunk)
    if (i % 50 === 49) {
      await new Promise((resolve) => setImmediate(resolve))
      gc()
      const external = process.memoryUsage().arrayBuffers - before.arrayBuffers
      if (external > peakExternal) peakExternal = external
    }
  }
  const margin = 4 * 1024 * 1024
  t.equal(app.sse.stats().dropped, 1, 'the stalled client was dropped, not buffered without bound')
  t.ok(peakExternal < budget + historyBytes + margin,
    `buffer memory peaked at ${(peakExternal / 1048576).toFixed(2)} MiB for 50 MiB sent (budget 1 MiB + history 1 MiB + 4 MiB margin)`)
  t.comment(`peak buffer growth ${(peakExternal / 1048576).toFixed(2)} MiB while 50 MiB was broadcast to a stalled client`)
  stalled.socket.destroy()
})

t.test('a backpressured reader that keeps taking bytes is never swept; one that takes none is', async (t) => {
  // Budget far above what is sent: only the heartbeat sweep may end a stream here.
  const { app, port } = await startApp({ maxBufferedBytes: 64 * 1024 * 1024, heartbeatMs: 250, maxAgeMs: 0 })
  t.teardown(() => app.close())
  const slow = rawStream(port)
  const dead = rawStream(port)
  await waitFor('two streams', () => app.sse.size === 2 && slow.received() > 0 && dead.received() > 0)
  slow.socket.pause()
  dead.socket.pause()
  const chunk = 's'.repeat(512 * 1024)
  const events = 32
  for (let i = 0; i < events; i++) app.sse.broadcast(chunk)
  const expected = slow.received() + events * Buffer.byteLength(`id: ${app.sse.lastEventId}\ndata: ${chunk}\n\n`)
  // The slow reader takes one chunk off its socket at a time, a few per heartbeat, so its stream
  // stays backpressured across many heartbeats while the sent bytes keep moving.
  const order: string[] = []
  let slowClosed = false
  slow.socket.once('close', () => { slowClosed = true })
  const reader = setInterval(() => {
    slow.socket.resume()
    slow.socket.once('data', () => slow.socket.pause())
  }, 10)
  t.teardown(() => clearInterval(reader))
  await waitFor('the slow reader to read everything, or be swept', () => {
    if (app.sse.stats().deadSwept > order.length) order.push('swept')
    return slow.received() >= expected || slowClosed
  }, 60_000)
  order.push('slow reader done')
  clearInterval(reader)
  t.same(order, ['swept', 'slow reader done'], 'one reader was swept while the slow one was still reading')
  t.equal(slowClosed, false, 'the slow reader is still connected')
  t.equal(app.sse.stats().deadSwept, 1)
  t.equal(app.sse.stats().dropped, 0)
  t.equal(app.sse.size, 1, 'and it was the dead one')
  slow.socket.destroy()
  dead.socket.destroy()
})

/**
 * One stream of an app whose heartbeat interval runs on a mocked clock (the test beats, one
 * heartbeat at a time), and the server side of its socket.
 */
async function beatenStream (t: Test): Promise<{ app: TestApp['app'], c: SseConnection, socket: Socket, beat: () => void }> {
  mock.timers.enable({ apis: ['setInterval'] })
  t.teardown(() => mock.timers.reset())
  const heartbeatMs = 60_000
  const { app, port } = await startApp({ heartbeatMs, maxBufferedBytes: 64 * 1024 * 1024, maxAgeMs: 0 })
  t.teardown(() => app.close())
  const sockets: Socket[] = []
  app.server.on('connection', (socket: Socket) => sockets.push(socket))
  const c = await connect(port)
  t.teardown(() => c.destroy())
  await waitFor('the stream to open', () => c.retries.length === 1 && sockets.length === 1)
  return { app, c, socket: sockets[0], beat: () => mock.timers.tick(heartbeatMs) }
}

t.test('with MAX_STALLED_HEARTBEATS N, a stream that takes no byte is still open after N - 1 stalled beats and swept at the Nth', async (t) => {
  const N = MAX_STALLED_HEARTBEATS
  const { app, c, socket, beat } = await beatenStream(t)
  // A corked socket hands nothing to the kernel: no progress at all, whatever the machine's load.
  socket.cork()
  await app.sse.broadcast('x'.repeat(256 * 1024))
  await waitFor('the stream to be backpressured', () => socket.writableNeedDrain)
  // The first beat sees the bytes the socket took before it was corked.
  beat()
  const alive: number[] = []
  for (let stalled = 1; stalled < N; stalled++) {
    beat()
    alive.push(app.sse.stats().deadSwept)
  }
  t.same(alive, Array(N - 1).fill(0), `not swept after ${N - 1} stalled beats`)
  beat()
  t.equal(app.sse.stats().deadSwept, 1, `swept at stalled beat ${N}`)
  await waitFor('the swept stream to end on the client', () => c.isEnded())
})

t.test('a stall that ended is forgotten: a stream stalled N - 1 beats, then drained, gets N stalled beats again before the sweep', async (t) => {
  const N = MAX_STALLED_HEARTBEATS
  const { app, c, socket, beat } = await beatenStream(t)
  const stall = async (): Promise<void> => {
    await app.sse.broadcast('x'.repeat(256 * 1024))
    await waitFor('the stream to be backpressured', () => socket.writableNeedDrain)
  }
  socket.cork()
  await stall()
  beat()
  for (let stalled = 1; stalled < N; stalled++) beat()
  t.equal(app.sse.stats().deadSwept, 0, `${N - 1} stalled beats: still open`)
  // The reader catches up: one beat sees a stream that is not backpressured.
  socket.uncork()
  await waitFor('the client to read everything', () => !socket.writableNeedDrain && socket.writableLength === 0 && c.events.length === 1)
  beat()
  // Corked before the beat's frame is written: from here the socket takes no byte at all.
  socket.cork()
  await stall()
  const alive: number[] = []
  for (let stalled = 1; stalled < N; stalled++) {
    beat()
    alive.push(app.sse.stats().deadSwept)
  }
  t.same(alive, Array(N - 1).fill(0), `the new stall: not swept after ${N - 1} beats (the old stall's count was reset)`)
  beat()
  t.equal(app.sse.stats().deadSwept, 1, `swept at the new stall's beat ${N}`)
})

t.test('the unsent-bytes budget is inclusive: a frame that fills it exactly is queued, one byte more drops the stream', async (t) => {
  const budget = 4096
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const ended: CloseReason[] = []
  const opened = new Promise<Subscriber>((resolve) => server.once('request', (_req, res: http.ServerResponse) => {
    const stream = subscriberOn(res, { maxBufferedBytes: budget, finished: (_s, why) => ended.push(why) })
    stream.open(200, {}, Buffer.from('retry: 1000\n\n'))
    resolve(stream)
  }))
  const c = await connect((server.address() as { port: number }).port, '/')
  t.teardown(() => c.destroy())
  const stream = await opened
  await waitFor('the retry: frame', () => c.retries.length === 1)
  t.equal(stream.fits(budget), true, 'exactly the budget fits')
  t.equal(stream.write(Buffer.alloc(budget, ':')), true, 'a frame of exactly the budget is queued')
  t.same(ended, [])
  t.equal(stream.write(Buffer.from(':\n\n')), false, 'the next byte would pass it')
  t.same(ended, ['dropped'])
})

t.test('a writer that waits for room again and again leaves nothing behind each wait: no listener for the stream\'s end, no drain listener', async (t) => {
  const frame = Buffer.from(`:${'x'.repeat(256 * 1024)}\n\n`)
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const opened = new Promise<{ stream: Subscriber, socket: Socket }>((resolve) => server.once('request', (_req, res: http.ServerResponse) => {
    const stream = subscriberOn(res, { maxBufferedBytes: 2 * frame.length })
    stream.open(200, {}, Buffer.from('retry: 1000\n\n'))
    resolve({ stream, socket: res.socket as Socket })
  }))
  const reader = net.connect((server.address() as { port: number }).port, '127.0.0.1')
  t.teardown(() => reader.destroy())
  reader.on('data', () => {})
  reader.write('GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
  const { stream, socket } = await opened
  let endListeners = 0
  const whenOver = stream.whenOver.bind(stream)
  stream.whenOver = (fn) => { endListeners++; whenOver(fn) }
  const drainListeners = socket.listenerCount('drain')
  const rounds = 8
  const backpressured: boolean[] = []
  const leftAfter: number[] = []
  for (let round = 0; round < rounds; round++) {
    reader.pause()
    // Fill the kernel's buffers and the socket's until one more frame would pass the budget.
    while (stream.fits(frame.length)) {
      stream.write(frame)
      await new Promise((resolve) => setImmediate(resolve))
    }
    backpressured.push(socket.writableNeedDrain)
    const fitted = stream.whenFits(frame.length)
    reader.resume()
    t.equal(await fitted, true, `round ${round}: room again once the reader read`)
    leftAfter.push(socket.listenerCount('drain') - drainListeners)
  }
  t.same(backpressured, Array(rounds).fill(true), `each of the ${rounds} waits was for the transport's drain`)
  t.equal(endListeners, 0, `${rounds} waits add no listener for the stream's end (one pending per wait would pile up on a long stream)`)
  t.same(leftAfter, Array(rounds).fill(0), 'and no drain listener outlives its wait')
  stream.end('expired')
})
