import t from 'tap'
import { startApp } from './fixtures/app'
import { rawExchange } from './fixtures/raw-http'
import { waitFor } from './fixtures/sse-connection'

t.test('HEAD on the stream path: the stream headers, the server closes at once, no slot taken', async (t) => {
  const { app, port } = await startApp({ maxClients: 1, heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  // A raw socket, like `curl -I`: it waits for whatever the server does next.
  const { text, isClosed } = rawExchange(port, 'HEAD /api/events HTTP/1.1\r\nHost: localhost\r\n\r\n')
  await waitFor('the server to close the connection', isClosed)
  const [head, body] = text().split('\r\n\r\n')
  t.match(head, /^HTTP\/1\.1 200 OK\r\n/)
  t.match(head, /\r\ncontent-type: text\/event-stream; charset=utf-8\r\n/i)
  t.match(head, /\r\nconnection: close(\r\n|$)/i)
  t.match(head, /\r\ncache-control: no-cache, no-transform\r\n/i)
  t.equal(body, '', 'no body')
  t.same([app.sse.size, app.sse.stats().accepted, app.sse.stats().rejected], [0, 0, 0], 'never admitted, never refused')
})
