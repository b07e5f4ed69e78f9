import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'

/**
 * Makes the server, not the client, close every connection it ends, so the TIME_WAIT lands on the
 * server's side and the client's ephemeral ports stay free (the incident's real harm).
 *
 * The response is sent without a length and without chunked encoding: its body runs until the
 * connection closes. A client therefore cannot see the response complete — and drop its socket
 * first — before the server's FIN arrives. (With a length or a final chunk, Node's client closes
 * as soon as it has read the last byte and wins the race about a quarter of the time.)
 */
export function openUntilClose (res: ServerResponse, status: number, headers: OutgoingHttpHeaders): void {
  res.useChunkedEncodingByDefault = false
  res.writeHead(status, headers)
}

/** Ends a response opened with openUntilClose and closes the connection right behind it. */
export function endAndClose (res: ServerResponse, last?: Buffer | string): void {
  res.end(last)
  const socket = res.socket
  if (socket === null) return
  // Every byte already in the kernel: closing now puts the FIN right behind them.
  if (socket.writableLength === 0) socket.destroy()
  else socket.end()
}
