import t from 'tap'
import { MAX_PIPELINED_BEHIND_STREAM } from '../lib/admission/admission'
import { startApp } from './fixtures/app'
import { rawExchange, type RawExchange } from './fixtures/raw-http'
import { connect, waitFor } from './fixtures/sse-connection'

/** Requests written back-to-back on one raw socket (HTTP/1.1 pipelining), and what comes back. */
function pipeline (port: number, requests: string[]): RawExchange {
  return rawExchange(port, requests.map((line) => `${line} HTTP/1.1\r\nHost: localhost\r\n\r\n`).join(''))
}

const streams = (count: number): string[] => Array.from({ length: count }, () => 'GET /api/events')
const statusLines = (text: string): number => text.match(/HTTP\/1\.1 \d{3}/g)?.length ?? 0

t.test('requests pipelined behind a stream take no slot and are no storm; the close frees the stream at once', async (t) => {
  const behind = MAX_PIPELINED_BEHIND_STREAM - 1
  // stormRefusalsPerSecond 5: counted as a storm, these refusals would make the next one be held.
  const { app, port } = await startApp({ maxClients: 2, heartbeatMs: 60_000, storm: { refusalsPerSecond: 5 } })
  t.teardown(() => app.close())
  const { socket, text } = pipeline(port, streams(1 + behind))
  await waitFor('every pipelined request to be refused', () => app.sse.stats().rejected === behind)
  t.equal(app.sse.stats().current, 1, 'one slot: the one stream the client can read')
  await waitFor('the stream to open', () => text().includes('retry:'))
  t.equal(statusLines(text()), 1, 'nothing is answered behind the stream')

  const second = await connect(port)
  t.equal(second.status, 200, 'the other slot is free')
  const refused = await connect(port)
  t.equal(refused.status, 503)
  t.equal(app.sse.stats().tarpitted, 0, 'the refusal was answered at once: the burst was no storm')

  socket.destroy()
  await waitFor('the slot to be freed', () => app.sse.stats().current === 1)
  t.equal(app.sse.stats().disconnected, 1)
  const fresh = await connect(port)
  t.equal(fresh.status, 200, 'a fresh client is admitted')
  fresh.destroy()
  second.destroy()
})

t.test('100 pipelined stream requests: the server closes the connection, no slot stays taken', async (t) => {
  const { app, port } = await startApp({ maxClients: 50, heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const { isClosed } = pipeline(port, streams(100))
  // The client never closes: the MAX_PIPELINED_BEHIND_STREAM-th request behind the stream does.
  await waitFor('the server to close the connection', isClosed)
  await waitFor('no slot taken', () => app.sse.stats().current === 0)
  t.same([app.sse.stats().accepted, app.sse.stats().rejected, app.sse.stats().disconnected], [1, 99, 1],
    'one stream admitted, every request behind it refused')
  const fresh = await connect(port)
  t.equal(fresh.status, 200, 'a fresh client is admitted')
  fresh.destroy()
})

t.test('exactly MAX_PIPELINED_BEHIND_STREAM requests behind a stream close the connection (one fewer does not: above)', async (t) => {
  const { app, port } = await startApp({ maxClients: 50, heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const { isClosed, socket } = pipeline(port, streams(1 + MAX_PIPELINED_BEHIND_STREAM))
  t.teardown(() => socket.destroy())
  await waitFor(`the server to close the connection at the ${MAX_PIPELINED_BEHIND_STREAM}th request behind the stream`, isClosed)
  await waitFor('no slot taken', () => app.sse.stats().current === 0)
  t.same([app.sse.stats().accepted, app.sse.stats().rejected], [1, MAX_PIPELINED_BEHIND_STREAM])
})

t.test('a stream request pipelined behind a finite answer is refused after it, then the server closes', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const { text, isClosed } = pipeline(port, ['GET /not-here', 'GET /api/events'])
  await waitFor('the server to close the connection', isClosed)
  t.match(text(), /^HTTP\/1\.1 404 [\s\S]*HTTP\/1\.1 503 [\s\S]*"reason":"pipelined"/, '404 first, then the refusal')
  t.match(text(), /retry-after: \d+/i)
  t.same([app.sse.stats().current, app.sse.stats().accepted, app.sse.stats().rejected], [0, 0, 1])
})
