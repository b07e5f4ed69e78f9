import type { ServerResponse } from 'node:http'

/** Headers of the hand-rolled streams: keep-alive, so the client usually closes the socket first. */
const HAND_ROLLED_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
  connection: 'keep-alive'
}
const HEARTBEAT_MS = 30_000

export interface HandRolledStream {
  /** Lifetime of this stream, in ms. */
  maxAgeMs: number
  /** Called when the max-age timer ends the stream. */
  onExpire: () => void
  /** Called once when the response is over, whoever ended it. */
  onClose: () => void
}

/**
 * A stream as Tower wrote them before tower-sse: headers, the first frames, and a heartbeat
 * interval and max-age timer of its own for every client.
 */
export function openHandRolledStream (res: ServerResponse, firstFrames: string, stream: HandRolledStream): void {
  res.writeHead(200, HAND_ROLLED_HEADERS)
  res.write(firstFrames)
  const heartbeat = setInterval(() => res.write(':\n\n'), HEARTBEAT_MS)
  const maxAge = setTimeout(() => {
    stream.onExpire()
    res.end()
  }, stream.maxAgeMs)
  res.once('close', () => {
    clearInterval(heartbeat)
    clearTimeout(maxAge)
    stream.onClose()
  })
}
