import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import { isHttp2 } from './internals'

/**
 * Makes the server, not the client, close every connection it ends, so the TIME_WAIT lands on the
 * server's side and the client's ephemeral ports stay free: a client that reconnects fast enough
 * while it holds every TIME_WAIT runs out of ports and can connect nowhere.
 *
 * The response is sent without a length and without chunked encoding: its body runs until the
 * connection closes. A client therefore cannot see the response complete — and drop its socket
 * first — before the server's FIN arrives. (With a length or a final chunk, Node's client closes
 * as soon as it has read the last byte and wins the race about a quarter of the time.)
 *
 * Under HTTP/2 (`Fastify({ http2: true })`) a response is one stream of a shared session: there is
 * no connection of its own to close, `Connection` is a forbidden hop-by-hop header (RFC 9113
 * §8.2.2), and ending the response ends just its stream.
 */
export function openUntilClose (res: ServerResponse, status: number, headers: OutgoingHttpHeaders): void {
  res.useChunkedEncodingByDefault = false
  res.writeHead(status, isHttp2(res) ? headers : { ...headers, connection: 'close' })
}

/** Ends a response opened with openUntilClose and closes the connection right behind it. */
export function endAndClose (res: ServerResponse, last?: Buffer | string): void {
  // A Buffer as latin1 text, the same bytes sent with the head in one buffer (see Subscriber.open).
  if (last === undefined) res.end()
  else if (typeof last === 'string') res.end(last)
  else res.end(last.toString('latin1'), 'latin1')
  // HTTP/2: res.socket stands for the session's socket, yet its end/destroy act on this stream
  // (destroy would cut what the stream has not sent yet); end() is all this stream needs.
  if (isHttp2(res)) return
  const socket = res.socket
  if (socket === null) return
  // Every byte already in the kernel: closing now puts the FIN right behind them.
  if (socket.writableLength === 0) socket.destroy()
  else socket.end()
}
