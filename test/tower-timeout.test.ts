import net from 'node:net'
import t from 'tap'
import { connect, waitFor } from './fixtures/sse-connection'
import { startTower } from './fixtures/tower'

const TRICKLE_EVERY_MS = 100
const MAX_TRICKLES = 80

/**
 * A raw socket that sends `head`, then one byte of `tail` every TRICKLE_EVERY_MS (at most
 * MAX_TRICKLES of them) until the server closes it. Resolves with what the server answered.
 */
function trickle (port: number, head: string, tail: string): Promise<{ answer: string, trickled: number }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    let answer = ''
    let trickled = 0
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { answer += chunk })
    socket.on('error', () => {})
    socket.write(head)
    const timer = setInterval(() => {
      if (trickled === MAX_TRICKLES || trickled === tail.length) {
        clearInterval(timer)
        socket.destroy()
        return
      }
      socket.write(tail[trickled++])
    }, TRICKLE_EVERY_MS)
    socket.on('close', () => {
      clearInterval(timer)
      resolve({ answer, trickled })
    })
  })
}

t.test('headers or a body that do not arrive within requestTimeoutMs get 408 and the close; streams are not cut', async (t) => {
  const { app, port } = await startTower({ heartbeatMs: 60_000 }, { requestTimeoutMs: 500 })
  t.teardown(() => app.close())
  const stream = await connect(port)
  t.equal(stream.status, 200)

  const body = JSON.stringify({ type: 'ci', title: 'slow', body: 'x'.repeat(200) })
  const [slowBody, slowHeaders] = await Promise.all([
    trickle(port, `POST /api/notify HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`, body),
    trickle(port, 'GET /api/events/stats HTTP/1.1\r\nHost: localhost\r\n', 'X-Slow: ' + 'y'.repeat(200) + '\r\n\r\n')
  ])
  for (const [what, result] of [['a slow body', slowBody], ['slow headers', slowHeaders]] as const) {
    t.match(result.answer, /^HTTP\/1\.1 408 Request Timeout\r\n/, `${what}: 408`)
    t.ok(result.trickled < MAX_TRICKLES, `${what}: the server closed the connection (after ${result.trickled} bytes)`)
  }
  t.equal(app.sse.stats().events, 0, 'the slow notification was never broadcast')

  // The stream was opened before both and outlived them.
  t.equal(stream.isEnded(), false, 'the stream is still open')
  t.equal((await app.sse.broadcast('still here')).delivered, 1)
  await waitFor('the stream to receive it', () => stream.events.some((e) => e.data === 'still here'))
  stream.destroy()
})
