/**
 * What the bench's raw-socket clients read: an HTTP/1.1 response off a socket (status, headers,
 * then the body), the body as SSE frames, and the tokens the producers put in them. Pure: no
 * socket here, so the test feeds it byte by byte.
 */

/** One SSE event as a client reads it (a frame with only `retry:` has neither data nor id). */
export interface SseFrame {
  id?: string
  event?: string
  data?: string
  retry?: number
}

/** Non-SSE bodies (a 204, a 404's JSON, a 500) are kept up to this many characters, for the report. */
const PLAIN_KEPT = 512

/**
 * One HTTP/1.1 response read off a raw socket, text as latin1 so that a character is a byte (the
 * tokens are ASCII): its status and headers, then its body — close-delimited (tower-sse's streams)
 * or chunked (node:http's default) — as SSE frames.
 */
export class SseResponseReader {
  /** 0 until the status line is in. */
  status = 0
  readonly headers: Record<string, string> = {}
  /** Body characters up to the end of the last complete frame: the character offset to resume from. */
  consumed = 0
  /** A body that is not an event stream, its first characters. */
  plain = ''
  /**
   * Whether the response is complete as its framing says: its Content-Length read, its last chunk
   * read, or a status that has no body. A close-delimited body (tower-sse's streams) ends only at the close.
   */
  done = false
  private received = 0
  private contentLength: number | null = null
  private head = ''
  private inHead = true
  private chunked = false
  private eventStream = false
  /** Chunked framing not yet decoded, and what is left of the current chunk (-1: its size line is next). */
  private framing = ''
  private chunkLeft = -1
  private body = ''

  /** Feeds what the socket read; returns the frames it completed. */
  push (text: string): SseFrame[] {
    if (this.inHead) {
      this.head += text
      const end = this.head.indexOf('\r\n\r\n')
      if (end < 0) return []
      this.readHead(this.head.slice(0, end))
      text = this.head.slice(end + 4)
      this.head = ''
      this.inHead = false
    }
    const decoded = this.chunked ? this.dechunk(text) : text
    this.received += decoded.length
    if (this.contentLength !== null && this.received >= this.contentLength) this.done = true
    if (!this.eventStream) {
      if (this.plain.length < PLAIN_KEPT) this.plain = (this.plain + decoded).slice(0, PLAIN_KEPT)
      return []
    }
    return this.frames(decoded)
  }

  private readHead (head: string): void {
    const [statusLine, ...lines] = head.split('\r\n')
    this.status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0)
    for (const line of lines) {
      const colon = line.indexOf(':')
      if (colon > 0) this.headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
    }
    this.chunked = /chunked/i.test(this.headers['transfer-encoding'] ?? '')
    const length = this.headers['content-length']
    if (!this.chunked && length !== undefined && /^\d+$/.test(length)) this.contentLength = Number(length)
    if (this.status === 204 || this.status === 304 || this.contentLength === 0) this.done = true
    this.eventStream = this.status === 200 && (this.headers['content-type'] ?? '').startsWith('text/event-stream')
  }

  private dechunk (text: string): string {
    this.framing += text
    let out = ''
    for (;;) {
      if (this.chunkLeft < 0) {
        const eol = this.framing.indexOf('\r\n')
        if (eol < 0) break
        const size = Number.parseInt(this.framing.slice(0, eol), 16)
        this.framing = this.framing.slice(eol + 2)
        if (!(size > 0)) {
          // The last chunk (or garbage): nothing more is body.
          this.done = true
          this.framing = ''
          this.chunkLeft = Number.POSITIVE_INFINITY
          break
        }
        this.chunkLeft = size
      } else if (this.chunkLeft === Number.POSITIVE_INFINITY) {
        this.framing = ''
        break
      } else if (this.chunkLeft > 0) {
        if (this.framing.length === 0) break
        const take = Math.min(this.chunkLeft, this.framing.length)
        out += this.framing.slice(0, take)
        this.framing = this.framing.slice(take)
        this.chunkLeft -= take
      } else {
        if (this.framing.length < 2) break
        this.framing = this.framing.slice(2)
        this.chunkLeft = -1
      }
    }
    return out
  }

  private frames (text: string): SseFrame[] {
    this.body += text
    const frames: SseFrame[] = []
    let from = 0
    for (;;) {
      const end = this.body.indexOf('\n\n', from)
      if (end < 0) break
      const frame = parseFrame(this.body.slice(from, end))
      if (frame !== null) frames.push(frame)
      this.consumed += end + 2 - from
      from = end + 2
    }
    if (from > 0) this.body = this.body.slice(from)
    return frames
  }
}

/** One block of an event stream (its lines, without the blank line) as a frame; null for a block of comments only. */
export function parseFrame (block: string): SseFrame | null {
  const frame: SseFrame = {}
  let any = false
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'data') frame.data = frame.data === undefined ? value : `${frame.data}\n${value}`
    else if (field === 'id') frame.id = value
    else if (field === 'event') frame.event = value
    else if (field === 'retry' && /^\d+$/.test(value)) frame.retry = Number(value)
    else continue
    any = true
  }
  return any ? frame : null
}

/** A token's data: its number, padded with `x` to `bytes` characters (never shorter than the number). */
export function tokenData (n: number, bytes: number): string {
  const head = String(n)
  return head.length + 1 >= bytes ? head : `${head} ${'x'.repeat(bytes - head.length - 1)}`
}

/** The number of the token in `data`, or -1 when it holds none. */
export function tokenNumber (data: string): number {
  const n = Number.parseInt(data, 10)
  return Number.isSafeInteger(n) && n >= 0 ? n : -1
}

/** Whether a frame is one of the producer's tokens (not `end`, `error`, `resync`, nor a bare `retry:`). */
export function isToken (frame: SseFrame): frame is SseFrame & { data: string } {
  return frame.data !== undefined && frame.event === undefined
}
