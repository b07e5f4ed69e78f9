/**
 * The wire: one event stream over fetch, parsed by eventsource-parser, reconnected by the policy.
 * It knows nothing of listeners or tabs: it reports states, opens, messages and errors to a sink
 * (the tab's own client, or the leader tab that relays them to the others).
 */
import { createParser, type EventSourceParser } from 'eventsource-parser'
import { TowerSseClientError, type TowerSseClientState, type WaitReason, type WireMessage } from './events.ts'
import { checkHeaders, MAX_TIMER_MS, TowerSseClientOptionError, type NormalizedClientOptions } from './options.ts'
import { describe } from '../shared/describe.ts'
import { backoffDelayMs, jitterUpMs } from '../shared/backoff.ts'
import { classifyResponse, parseRetryAfterMs, serverErrorCode } from './policy.ts'

export interface WireSink {
  state: (state: TowerSseClientState) => void
  open: () => void
  message: (message: WireMessage) => void
  error: (error: TowerSseClientError) => void
  /** The server answered 204: the client has the whole answer (the wire then closes, with no error). */
  end: () => void
}

/**
 * The bodies read to their end rather than dropped (a refusal, the rest of a stream after its last
 * word) are bounded: a server that keeps sending is cut off.
 */
const MAX_DRAIN_BYTES = 64 * 1024
const MAX_DRAIN_MS = 5000

/** Reads a refusal's body until it ends (the server closed) or passes its bounds, then lets go. */
async function drainBody (response: Response): Promise<void> {
  const body = response.body
  // An onResponse hook may have read it already.
  if (body === null || response.bodyUsed || body.locked) return
  await drain(body.getReader())
}

/** Reads on until the body ends (the server closed: it keeps the TIME_WAIT) or passes the bounds, then lets go. */
async function drain (reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
  const timer = setTimeout(() => { void reader.cancel().catch(() => {}) }, MAX_DRAIN_MS)
  try {
    for (let bytes = 0; bytes <= MAX_DRAIN_BYTES;) {
      const { done, value } = await reader.read()
      if (done) return
      bytes += value.byteLength
    }
    await reader.cancel()
  } catch {
    // A broken refusal is still a refusal.
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Lets go of a response the client will not read as its stream: a finite answer is read to its
 * end (a server that closes first then keeps the TIME_WAIT), an event stream, which may never end, is cancelled.
 */
async function letGo (response: Response): Promise<void> {
  if (classifyResponse(response.status, response.headers.get('content-type')).kind === 'stream') {
    await response.body?.cancel().catch(() => {})
    return
  }
  await drainBody(response)
}

/**
 * `Last-Event-ID` as the spec sends it, UTF-8 encoded. fetch takes header values as byte strings
 * (one char per byte) and refuses chars above U+00FF, so a non-ASCII id is passed as its UTF-8 bytes.
 */
export function lastEventIdHeader (id: string): string {
  // eslint-disable-next-line no-control-regex -- ASCII is \x00-\x7f, control characters included
  if (/^[\x00-\x7f]*$/.test(id)) return id
  return Array.from(new TextEncoder().encode(id), (byte) => String.fromCharCode(byte)).join('')
}

function firstLineBreak (text: string, from: number): number {
  const cr = text.indexOf('\r', from)
  const lf = text.indexOf('\n', from)
  return cr === -1 ? lf : lf === -1 ? cr : Math.min(cr, lf)
}

/**
 * Splits the stream into lines and feeds them to eventsource-parser one by one, to apply the one
 * rule it skips: a block with `id:` and no `data:` still sets the id sent on the next reconnect.
 */
class LineFeeder {
  private pending = ''
  private crAtChunkEnd = false
  private blockId: string | undefined
  private blockHasData = false

  constructor (private readonly parser: EventSourceParser, private readonly onIdOnly: (id: string) => void) {}

  feed (text: string): void {
    const chunk = this.pending + text
    // A CRLF split across two chunks is one line break.
    let start = this.crAtChunkEnd && chunk.startsWith('\n') ? 1 : 0
    this.crAtChunkEnd = false
    for (let end = firstLineBreak(chunk, start); end !== -1; end = firstLineBreak(chunk, start)) {
      this.line(chunk.slice(start, end))
      start = chunk[end] === '\r' && chunk[end + 1] === '\n' ? end + 2 : end + 1
      if (chunk[end] === '\r' && end + 1 === chunk.length) this.crAtChunkEnd = true
    }
    this.pending = chunk.slice(start)
  }

  private line (line: string): void {
    if (line === '') {
      if (this.blockId !== undefined && !this.blockHasData) this.onIdOnly(this.blockId)
      this.blockId = undefined
      this.blockHasData = false
    } else {
      const colon = line.indexOf(':')
      const field = colon === -1 ? line : line.slice(0, colon)
      if (field === 'data') this.blockHasData = true
      if (field === 'id') {
        const value = colon === -1 ? '' : line.slice(line[colon + 1] === ' ' ? colon + 2 : colon + 1)
        if (!value.includes('\0')) this.blockId = value
      }
    }
    this.parser.feed(`${line}\n`)
  }
}

/**
 * One stream, reconnected until close(), the answer's end (`event: end`, or 204 on a reconnect), or a
 * fatal answer (the server's own `event: error`, a 4xx other than 429, a non-SSE 200).
 */
export class StreamWire {
  private currentState: TowerSseClientState = { kind: 'connecting', attempt: 1 }
  private lastId: string
  private reconnectMs: number
  /** Consecutive failed attempts; reset only by a stream that stayed open healthyAfterMs. */
  private failures = 0
  private controller: AbortController | null = null
  private retryTimer: ReturnType<typeof setTimeout> | undefined

  constructor (
    private readonly url: string,
    private readonly options: NormalizedClientOptions,
    lastEventId: string,
    private readonly sink: WireSink
  ) {
    this.lastId = lastEventId
    this.reconnectMs = options.retryMs
  }

  get state (): TowerSseClientState {
    return this.currentState
  }

  get lastEventId (): string {
    return this.lastId
  }

  start (): void {
    void this.connect()
  }

  /** Stops for good: aborts the request in flight and cancels any pending retry. */
  close (): void {
    this.stop(null)
  }

  private async connect (): Promise<void> {
    if (this.currentState.kind === 'closed') return
    this.retryTimer = undefined
    const controller = new AbortController()
    this.controller = controller
    const attempt = this.failures + 1
    this.setState({ kind: 'connecting', attempt })
    const headers = await this.requestHeaders(attempt, controller)
    if (headers === null) return
    let response: Response
    try {
      // Called unbound: browsers refuse a fetch invoked as a method of another object.
      const { fetch } = this.options
      response = await fetch(this.url, {
        method: this.options.method,
        // Any typed array is a body fetch takes; the DOM types name only those over an ArrayBuffer.
        body: this.options.body as BodyInit | undefined,
        headers,
        signal: controller.signal,
        cache: 'no-store',
        credentials: this.options.withCredentials ? 'include' : 'same-origin'
      })
    } catch (error) {
      if (!controller.signal.aborted) this.failedAttempt(new TowerSseClientError('could not connect', null, false, error), 'network-error')
      return
    }
    if (controller.signal.aborted) {
      void response.body?.cancel().catch(() => {})
      return
    }
    if (this.options.onResponse !== undefined && !(await this.askOnResponse(response, controller))) return
    const verdict = classifyResponse(response.status, response.headers.get('content-type'))
    if (verdict.kind === 'stream') {
      await this.readStream(response, controller)
      return
    }
    if (verdict.kind === 'done') {
      // The client has the whole answer (its Last-Event-ID is the end's): done, not failed.
      await drainBody(response)
      if (controller.signal.aborted) return
      this.sink.end()
      this.stop(null)
      return
    }
    if (verdict.kind === 'stop') {
      void response.body?.cancel().catch(() => {})
      this.stop(new TowerSseClientError(verdict.message, response.status, true))
      return
    }
    // Read the (small) refusal to its end rather than drop it: a server that closes first (as
    // tower-sse does) then keeps the TIME_WAIT, not this machine's ephemeral port.
    await drainBody(response)
    if (controller.signal.aborted) return
    const retryAfterMs = verdict.reason === 'refused'
      ? parseRetryAfterMs(response.headers.get('retry-after'), Date.now())
      : null
    const error = new TowerSseClientError(`the server answered HTTP ${response.status}`, response.status, false)
    this.failedAttempt(error, verdict.reason, retryAfterMs, response.status)
  }

  /**
   * This attempt's request headers: the application's (fixed, or from its function, called for
   * every attempt), then `Accept` unless it set one and the client's own `Last-Event-ID`. null when
   * the attempt is over already: the function failed (retried after the backoff), returned
   * something fetch cannot send (the client stops), or close() came meanwhile.
   */
  private async requestHeaders (attempt: number, controller: AbortController): Promise<Headers | null> {
    const { headers } = this.options
    let given: unknown = headers
    if (typeof headers === 'function') {
      try {
        given = await headers({ attempt, lastEventId: this.lastId })
      } catch (error) {
        if (!controller.signal.aborted) this.failedAttempt(new TowerSseClientError('the headers function failed', null, false, error, 'TOWER_SSE_CLIENT_HOOK'), 'hook-error')
        return null
      }
      if (controller.signal.aborted) return null
      try {
        checkHeaders('headers()', given)
      } catch (error) {
        this.stop(new TowerSseClientError((error as TowerSseClientOptionError).message.replace(/^tower-sse\/client: /, ''), null, true))
        return null
      }
    }
    const request = new Headers(given as Record<string, string>)
    if (!request.has('accept')) request.set('accept', 'text/event-stream')
    if (this.lastId !== '') request.set('last-event-id', lastEventIdHeader(this.lastId))
    return request
  }

  /**
   * Shows the response to the application's onResponse first; false when that ended the attempt:
   * it asked for a retry or failed (retried after the backoff), answered something else (the
   * client stops), or close() came meanwhile.
   */
  private async askOnResponse (response: Response, controller: AbortController): Promise<boolean> {
    const { status } = response
    let decision: unknown
    try {
      decision = await this.options.onResponse?.(response)
    } catch (error) {
      if (controller.signal.aborted) return false
      await letGo(response)
      if (!controller.signal.aborted) this.failedAttempt(new TowerSseClientError('the onResponse function failed', status, false, error, 'TOWER_SSE_CLIENT_HOOK'), 'hook-error', null, status)
      return false
    }
    if (controller.signal.aborted) {
      void response.body?.cancel().catch(() => {})
      return false
    }
    if (decision === undefined) return true
    await letGo(response)
    if (controller.signal.aborted) return false
    if (decision === 'retry') {
      this.failedAttempt(new TowerSseClientError(`the server answered HTTP ${status}; onResponse asked for a retry`, status, false), 'retry-requested', null, status)
    } else {
      this.stop(new TowerSseClientError(`onResponse must return undefined or 'retry', got ${describe(decision)}`, status, true))
    }
    return false
  }

  private async readStream (response: Response, controller: AbortController): Promise<void> {
    const openedAt = Date.now()
    // MessageEvent.origin is the origin of the final URL, after redirects; a synthetic response has none.
    const origin = new URL(response.url === '' ? this.url : response.url).origin
    this.setState({ kind: 'open', since: openedAt })
    this.sink.open()
    // A server refusing with rejectWith 'retry' sends a 200 stream with `event: refused` and ends it.
    let refused = false
    const parser = createParser({
      onEvent: (event) => {
        if (event.event === 'refused') refused = true
        // A listener may have closed the client while an earlier event of the same chunk was delivered.
        if (this.currentState.kind !== 'open') return
        // As in EventSource, an `id:` field (even empty) replaces the last event id.
        if (event.id !== undefined) this.lastId = event.id
        const type = event.event ?? 'message'
        this.sink.message({ type, data: event.data, id: event.id, lastEventId: this.lastId, origin })
        // The server's last word on an answer, delivered above like any named event: `end` (it is
        // complete), or its own `error` (it failed: asking again would fail again). Either way the
        // client closes for good, and reads on until the server closes (below).
        if (type === 'end') {
          this.stop(null, false)
        } else if (type === 'error') {
          const code = serverErrorCode(event.data)
          if (code !== null) {
            const error = new TowerSseClientError(`the server ended the stream with its error ${code}`, response.status, true, undefined, 'TOWER_SSE_CLIENT_SERVER_ERROR', code)
            this.stop(error, false)
          }
        }
      },
      onRetry: (ms) => { this.reconnectMs = Math.min(ms, MAX_TIMER_MS) }
    })
    const lines = new LineFeeder(parser, (id) => { this.lastId = id })
    // The decoder drops the stream's one leading BOM, as the spec says; a second one stays.
    const decoder = new TextDecoder()
    let failure: unknown = null
    try {
      // A 200 without a body (an empty stream) ends at once, like any other that ends.
      const reader = response.body?.getReader()
      for (;;) {
        const { done, value } = reader === undefined ? { done: true, value: undefined } : await reader.read()
        if (done) break
        lines.feed(decoder.decode(value, { stream: true }))
        // Closed by the server's last word (not by close(), which aborts): the rest of the body is
        // read, events dropped, until the server closes it, so that the server closes first.
        if (this.currentState.kind === 'closed') {
          if (reader !== undefined && !controller.signal.aborted) await drain(reader)
          return
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return
      failure = error
    }
    if (this.currentState.kind === 'closed') return
    // Only a stream that stayed open a while proves the server healthy; a first 200 does not.
    if (Date.now() - openedAt >= this.options.healthyAfterMs) this.failures = 0
    const reconnectMs = Math.max(this.reconnectMs, this.options.minRetryMs)
    const retry = jitterUpMs(reconnectMs, this.options.retryJitterRatio, this.options.random)
    if (failure === null && refused) {
      this.failures++
      this.wait('refused', retry, new TowerSseClientError('the server refused the stream (event: refused)', response.status, false), response.status)
      return
    }
    if (failure === null) {
      // The server ended the stream (max age, shutdown): come back after its retry: value.
      this.wait('stream-ended', retry, new TowerSseClientError('the server ended the stream; reconnecting', null, false, undefined, 'TOWER_SSE_CLIENT_ENDED'), null)
      return
    }
    this.failures++
    const backoff = backoffDelayMs(this.failures, this.options.random, this.options.backoffBaseMs, this.options.backoffCapMs)
    this.wait('network-error', Math.max(retry, backoff), new TowerSseClientError('the stream broke', null, false, failure), null)
  }

  /** A failed attempt: Retry-After when the server gave one, else exponential backoff. */
  private failedAttempt (error: TowerSseClientError, reason: WaitReason, retryAfterMs: number | null = null, status: number | null = null): void {
    this.failures++
    const delayMs = retryAfterMs !== null && retryAfterMs > 0
      ? jitterUpMs(retryAfterMs, this.options.retryAfterJitterRatio, this.options.random)
      : backoffDelayMs(this.failures, this.options.random, this.options.backoffBaseMs, this.options.backoffCapMs)
    this.wait(reason, delayMs, error, status)
  }

  /**
   * Schedules the next attempt, then reports the state and the error: as EventSource, readyState
   * is CONNECTING when `error` fires, and a listener that calls close() cancels the attempt.
   */
  private wait (reason: WaitReason, delayMs: number, error: TowerSseClientError, status: number | null): void {
    const ms = Math.min(delayMs, MAX_TIMER_MS)
    this.controller = null
    this.retryTimer = setTimeout(() => { void this.connect() }, ms)
    this.setState({ kind: 'waiting', reason, retryAt: Date.now() + ms, delayMs: ms, status, failures: this.failures })
    if (this.currentState.kind === 'waiting') this.sink.error(error)
  }

  /** Closes for good; `abortRequest` false after the server's last word, whose response is read to its end. */
  private stop (error: TowerSseClientError | null, abortRequest = true): void {
    if (this.currentState.kind === 'closed') return
    clearTimeout(this.retryTimer)
    this.retryTimer = undefined
    if (abortRequest) this.controller?.abort()
    this.controller = null
    this.setState({ kind: 'closed', error })
    if (error !== null) this.sink.error(error)
  }

  private setState (state: TowerSseClientState): void {
    this.currentState = state
    this.sink.state(state)
  }
}
