/**
 * tower-sse/client: a reconnecting Server-Sent Events client for Node ≥ 20 and browsers.
 *
 * Shaped like EventSource, but it never joins a reconnect storm: it honours `Retry-After` on
 * 503/429 (EventSource gives up for good), backs off exponentially with full jitter on errors,
 * resets its failure count only after a connection stayed healthy for a while (resetting on the
 * first 200 is what turned one editor extension into a storm), and stops on 204 or a 4xx.
 *
 * One module on purpose: browsers load it as an ES module without a bundler, with
 * `eventsource-parser` resolved by an import map; Node loads the CommonJS build.
 */
import { createParser, type EventSourceMessage } from 'eventsource-parser'

/** A source of uniform numbers in [0, 1); injectable so tests can seed it. */
export type RandomSource = () => number

export interface TowerSseClientOptions {
  /** Extra request headers (e.g. authorization). */
  headers?: Record<string, string>
  /** The fetch to stream with; the global one by default. */
  fetch?: typeof globalThis.fetch
  /** Uniform random source for every jitter; replace it only to make tests repeatable. */
  random?: RandomSource
  /** Reconnection time until the server sends `retry:`, in ms. */
  retryMs?: number
  /** Floor under the reconnection time, whatever `retry:` says: a server sending `retry: 50` cannot drive a loop. */
  minRetryMs?: number
  /** After a stream ends, wait the reconnection time × [1, 1 + retryJitterRatio]. */
  retryJitterRatio?: number
  /** After a 503/429, wait its Retry-After × [1, 1 + retryAfterJitterRatio]. */
  retryAfterJitterRatio?: number
  /** First step of the exponential backoff on network errors and 5xx, in ms. */
  backoffBaseMs?: number
  /** Longest backoff step, in ms. */
  backoffCapMs?: number
  /** How long a stream must stay open before the failure count starts again from zero, in ms. */
  healthyAfterMs?: number
  /** Resume after this event id (sent as `Last-Event-ID` on the first request). */
  lastEventId?: string
}

/** Every default in one place. */
export const CLIENT_DEFAULTS = Object.freeze({
  retryMs: 3000,
  minRetryMs: 1000,
  retryJitterRatio: 0.2,
  retryAfterJitterRatio: 0.5,
  backoffBaseMs: 1000,
  backoffCapMs: 60_000,
  healthyAfterMs: 30_000
})

type NumericOption = keyof typeof CLIENT_DEFAULTS

// Timers hold at most 2^31 - 1 ms; a larger delay would fire at once.
const MAX_TIMER_MS = 2 ** 31 - 1
const NUMBER_RULES: Record<NumericOption, { min: number, max: number }> = {
  retryMs: { min: 0, max: MAX_TIMER_MS },
  minRetryMs: { min: 0, max: MAX_TIMER_MS },
  retryJitterRatio: { min: 0, max: 10 },
  retryAfterJitterRatio: { min: 0, max: 10 },
  backoffBaseMs: { min: 1, max: MAX_TIMER_MS },
  backoffCapMs: { min: 1, max: MAX_TIMER_MS },
  healthyAfterMs: { min: 0, max: Number.MAX_SAFE_INTEGER }
}
const KNOWN_OPTIONS = new Set<string>([...Object.keys(CLIENT_DEFAULTS), 'headers', 'fetch', 'random', 'lastEventId'])

/** Thrown by the constructor; its message names the option and the value that was refused. */
export class TowerSseClientOptionError extends TypeError {
  readonly code = 'TOWER_SSE_CLIENT_OPTION'
  readonly option: string
  constructor (option: string, value: unknown, expected: string) {
    super(`tower-sse/client: option "${option}" must be ${expected}, got ${describe(value)}`)
    this.name = 'TowerSseClientOptionError'
    this.option = option
  }
}

function describe (value: unknown): string {
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'bigint') return `${value}n`
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

type NormalizedClientOptions = Record<NumericOption, number> & {
  headers: Record<string, string>
  fetch: typeof globalThis.fetch
  random: RandomSource
  lastEventId: string
}

function normalizeClientOptions (input: TowerSseClientOptions | undefined): NormalizedClientOptions {
  const given: Record<string, unknown> = { ...(input ?? {}) }
  for (const key of Object.keys(given)) {
    if (!KNOWN_OPTIONS.has(key)) {
      throw new TowerSseClientOptionError(key, given[key], `one of the known options (${[...KNOWN_OPTIONS].join(', ')})`)
    }
  }
  const numbers = {} as Record<NumericOption, number>
  for (const key of Object.keys(NUMBER_RULES) as NumericOption[]) {
    const value = given[key] ?? CLIENT_DEFAULTS[key]
    const { min, max } = NUMBER_RULES[key]
    if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
      throw new TowerSseClientOptionError(key, value, `a number between ${min} and ${max}`)
    }
    numbers[key] = value
  }
  if (numbers.backoffCapMs < numbers.backoffBaseMs) {
    throw new TowerSseClientOptionError('backoffCapMs', numbers.backoffCapMs, `at least backoffBaseMs (${numbers.backoffBaseMs})`)
  }
  const headers = given.headers ?? {}
  if (typeof headers !== 'object' || headers === null || Object.values(headers).some((v) => typeof v !== 'string')) {
    throw new TowerSseClientOptionError('headers', headers, 'an object of string header values')
  }
  const fetchImpl = given.fetch ?? globalThis.fetch
  if (typeof fetchImpl !== 'function') {
    throw new TowerSseClientOptionError('fetch', fetchImpl, 'a fetch function (Node ≥ 20 and browsers have one built in)')
  }
  const random = given.random ?? Math.random
  if (typeof random !== 'function') {
    throw new TowerSseClientOptionError('random', random, 'a function returning a number in [0, 1)')
  }
  const lastEventId = given.lastEventId ?? ''
  if (typeof lastEventId !== 'string' || /[\r\n\0]/.test(lastEventId)) {
    throw new TowerSseClientOptionError('lastEventId', lastEventId, 'a string without CR, LF or NUL')
  }
  return {
    ...numbers,
    headers: headers as Record<string, string>,
    fetch: fetchImpl as typeof globalThis.fetch,
    random: random as RandomSource,
    lastEventId
  }
}

// ---------------------------------------------------------------------------------------------
// The reconnect policy: pure functions, so it can be tested over many seeded draws.

/**
 * Exponential backoff with full jitter: uniform in [0, min(cap, base × 2^(failures - 1))].
 * Full jitter spreads clients that failed together over the whole window instead of a band.
 */
export function backoffDelayMs (failures: number, random: RandomSource, baseMs: number, capMs: number): number {
  if (!Number.isSafeInteger(failures) || failures < 1) {
    throw Object.assign(new RangeError(`tower-sse/client: failures must be an integer >= 1, got ${failures}`), { code: 'TOWER_SSE_CLIENT_ARGUMENT' })
  }
  // 2^(failures-1) overflows to Infinity for huge counts, which the cap absorbs.
  const ceiling = Math.min(capMs, baseMs * 2 ** (failures - 1))
  return Math.floor(random() * ceiling)
}

/** A wait of at least `ms`, stretched by up to `ratio` × ms so that clients do not return together. */
export function jitterUpMs (ms: number, ratio: number, random: RandomSource): number {
  return Math.round(ms * (1 + ratio * random()))
}

// The HTTP-date every current server sends (RFC 9110 IMF-fixdate); Date.parse alone accepts
// almost anything ("-3" is a year), so the shape is checked first.
const IMF_FIXDATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/

/**
 * A `Retry-After` value (RFC 9110 §10.2.3: delay-seconds or an IMF-fixdate HTTP-date) as ms from
 * `nowMs`, or null when absent or unreadable (the caller then backs off). A past date means 0.
 */
export function parseRetryAfterMs (value: string | null, nowMs: number): number | null {
  if (value === null) return null
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const date = IMF_FIXDATE.test(text) ? Date.parse(text) : Number.NaN
  return Number.isNaN(date) ? null : Math.max(0, date - nowMs)
}

/** What a response means for the client: a stream, a reason to wait, or a reason to stop. */
export type ResponseVerdict =
  | { kind: 'stream' }
  | { kind: 'wait', reason: 'refused' | 'server-error' }
  | { kind: 'stop', message: string }

export function classifyResponse (status: number, contentType: string | null): ResponseVerdict {
  if (status === 200) {
    if (/^text\/event-stream\s*(;|$)/i.test(contentType ?? '')) return { kind: 'stream' }
    return { kind: 'stop', message: `expected a text/event-stream response, got content-type ${JSON.stringify(contentType)}` }
  }
  if (status === 204) return { kind: 'stop', message: 'the server answered 204 No Content: it asks the client to stop reconnecting' }
  if (status === 429 || status === 503) return { kind: 'wait', reason: 'refused' }
  if (status >= 500 && status <= 599) return { kind: 'wait', reason: 'server-error' }
  return { kind: 'stop', message: `the server answered HTTP ${status}, which reconnecting cannot fix` }
}

/** Refusal bodies read to their end are bounded: a server that keeps sending is cut off. */
const MAX_REFUSAL_BODY_BYTES = 64 * 1024
const MAX_REFUSAL_BODY_MS = 5000

/** Reads a refusal's body until it ends (the server closed) or passes its bounds, then lets go. */
async function drainBody (response: Response): Promise<void> {
  const body = response.body
  if (body === null) return
  const reader = body.getReader()
  const timer = setTimeout(() => { void reader.cancel().catch(() => {}) }, MAX_REFUSAL_BODY_MS)
  try {
    for (let bytes = 0; bytes <= MAX_REFUSAL_BODY_BYTES;) {
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

// ---------------------------------------------------------------------------------------------
// States, errors and events.

/** Why the client is waiting: refused (503/429), server error (other 5xx), network error, stream ended. */
export type WaitReason = 'refused' | 'server-error' | 'network-error' | 'stream-ended'

export type TowerSseClientState =
  | { readonly kind: 'connecting', readonly attempt: number }
  | { readonly kind: 'open', readonly since: number }
  | {
    readonly kind: 'waiting'
    readonly reason: WaitReason
    /** Epoch ms of the next attempt. */
    readonly retryAt: number
    readonly delayMs: number
    /** The HTTP status behind the wait, or null for a network error or an ended stream. */
    readonly status: number | null
    /** Consecutive failures so far (0 after a healthy stream ended normally). */
    readonly failures: number
  }
  | { readonly kind: 'closed', readonly error: TowerSseClientError | null }

/** A failed attempt, or the reason the client stopped for good (`fatal`). */
export class TowerSseClientError extends Error {
  /**
   * Stable, to match on: TOWER_SSE_CLIENT_FATAL (stopped for good), _NETWORK (no response, or the
   * stream broke), _REFUSED (503/429, or a refusal stream), _HTTP (another status worth a retry).
   */
  readonly code: TowerSseClientErrorCode
  /** The HTTP status, or null when no response came (network error). */
  readonly status: number | null
  readonly fatal: boolean
  constructor (message: string, status: number | null, fatal: boolean, cause?: unknown) {
    super(`tower-sse/client: ${message}${describeCause(cause)}`, cause === undefined ? undefined : { cause })
    this.name = 'TowerSseClientError'
    this.status = status
    this.fatal = fatal
    this.code = fatal
      ? 'TOWER_SSE_CLIENT_FATAL'
      : status === null
        ? 'TOWER_SSE_CLIENT_NETWORK'
        // A 200 that is a failure is the plugin's refusal stream (rejectWith 'retry').
        : status === 503 || status === 429 || status === 200 ? 'TOWER_SSE_CLIENT_REFUSED' : 'TOWER_SSE_CLIENT_HTTP'
  }
}

export type TowerSseClientErrorCode = 'TOWER_SSE_CLIENT_FATAL' | 'TOWER_SSE_CLIENT_NETWORK' | 'TOWER_SSE_CLIENT_REFUSED' | 'TOWER_SSE_CLIENT_HTTP'

// fetch's errors are generic ("fetch failed", "terminated"); the code underneath says what happened.
function describeCause (cause: unknown): string {
  if (!(cause instanceof Error)) return ''
  const code = (cause.cause as { code?: unknown } | undefined)?.code
  return `: ${cause.message}${typeof code === 'string' ? ` (${code})` : ''}`
}

/** Fired as `error` on every failed attempt; `error.fatal` says whether the client stopped. */
export class TowerSseErrorEvent extends Event {
  constructor (readonly error: TowerSseClientError) {
    super('error')
  }
}

/** Fired as `statechange` whenever `state` changes. */
export class TowerSseStateEvent extends Event {
  constructor (readonly state: TowerSseClientState) {
    super('statechange')
  }
}

/** One server event, as the async iterator yields it. */
export interface TowerSseMessage {
  /** `message`, the `event:` name, or `resync`. */
  readonly type: string
  readonly data: string
  readonly lastEventId: string
}

export interface TowerSseClientEventMap {
  open: Event
  message: MessageEvent<string>
  /** The server's `event: resync`: too far behind to replay what was missed, so refetch state. */
  resync: MessageEvent<string>
  error: TowerSseErrorEvent
  statechange: TowerSseStateEvent
}

type Listener<E> = ((event: E) => void) | { handleEvent: (event: E) => void }

// Typed overloads for the known event types; named server events arrive as MessageEvent.
export interface TowerSseClient {
  addEventListener<K extends keyof TowerSseClientEventMap>(type: K, listener: Listener<TowerSseClientEventMap[K]> | null, options?: boolean | AddEventListenerOptions): void
  addEventListener(type: string, listener: Listener<MessageEvent<string>> | null, options?: boolean | AddEventListenerOptions): void
  removeEventListener<K extends keyof TowerSseClientEventMap>(type: K, listener: Listener<TowerSseClientEventMap[K]> | null, options?: boolean | EventListenerOptions): void
  removeEventListener(type: string, listener: Listener<MessageEvent<string>> | null, options?: boolean | EventListenerOptions): void
}

interface MessageSink {
  push: (message: TowerSseMessage) => void
  end: (error: TowerSseClientError | null) => void
}

// ---------------------------------------------------------------------------------------------

/**
 * `new TowerSseClient(url, options)` connects at once and keeps reconnecting until `close()` or
 * a fatal answer (204, 4xx other than 429, a non-SSE 200). Listen for `message`, named events,
 * `resync`, `open`, `error` and `statechange`, or iterate with `for await`.
 */
export class TowerSseClient extends EventTarget {
  static readonly CONNECTING = 0
  static readonly OPEN = 1
  static readonly CLOSED = 2

  readonly url: string
  private readonly options: NormalizedClientOptions
  private currentState: TowerSseClientState = { kind: 'connecting', attempt: 1 }
  private lastId: string
  private reconnectMs: number
  /** Consecutive failed attempts; reset only by a stream that stayed open healthyAfterMs. */
  private failures = 0
  private controller: AbortController | null = null
  private retryTimer: ReturnType<typeof setTimeout> | undefined
  private readonly sinks = new Set<MessageSink>()

  constructor (url: string | URL, options?: TowerSseClientOptions) {
    super()
    if (typeof url !== 'string' && !(url instanceof URL)) {
      throw new TypeError(`tower-sse/client: url must be a string or URL, got ${describe(url)}`)
    }
    this.url = String(url)
    this.options = normalizeClientOptions(options)
    this.lastId = this.options.lastEventId
    this.reconnectMs = this.options.retryMs
    // Next microtask, so that listeners added right after `new` see the first statechange.
    queueMicrotask(() => { void this.connect() })
  }

  get state (): TowerSseClientState {
    return this.currentState
  }

  /** 0 connecting (or waiting to reconnect), 1 open, 2 closed: as EventSource. */
  get readyState (): number {
    switch (this.currentState.kind) {
      case 'open': return TowerSseClient.OPEN
      case 'closed': return TowerSseClient.CLOSED
      default: return TowerSseClient.CONNECTING
    }
  }

  /** The id of the last event seen; sent as `Last-Event-ID` on every reconnect. */
  get lastEventId (): string {
    return this.lastId
  }

  /** Stops for good: aborts the request in flight and cancels any pending retry. */
  close (): void {
    this.stop(null)
  }

  /** Yields every server event (message, named, resync) from now until close(); throws a fatal error after the events before it. */
  [Symbol.asyncIterator] (): AsyncIterator<TowerSseMessage> {
    const queue: TowerSseMessage[] = []
    let finished = this.currentState.kind === 'closed'
    let failure: TowerSseClientError | null = null
    let wake: (() => void) | null = null
    const sink: MessageSink = {
      push: (message) => {
        queue.push(message)
        wake?.()
      },
      end: (error) => {
        finished = true
        failure = error
        // close() means stop now, as with EventSource; before a fatal error, what arrived is still yielded.
        if (error === null) queue.length = 0
        wake?.()
      }
    }
    if (!finished) this.sinks.add(sink)
    return {
      next: async () => {
        while (queue.length === 0 && !finished) await new Promise<void>((resolve) => { wake = resolve })
        wake = null
        const message = queue.shift()
        if (message !== undefined) return { value: message, done: false }
        if (failure !== null) throw failure
        return { value: undefined, done: true }
      },
      return: async () => {
        this.sinks.delete(sink)
        finished = true
        queue.length = 0
        return { value: undefined, done: true }
      }
    }
  }

  private async connect (): Promise<void> {
    if (this.currentState.kind === 'closed') return
    this.retryTimer = undefined
    const controller = new AbortController()
    this.controller = controller
    this.setState({ kind: 'connecting', attempt: this.failures + 1 })
    const headers: Record<string, string> = { accept: 'text/event-stream', ...this.options.headers }
    if (this.lastId !== '') headers['last-event-id'] = this.lastId
    let response: Response
    try {
      // Called unbound: browsers refuse a fetch invoked as a method of another object.
      const { fetch } = this.options
      response = await fetch(this.url, { headers, signal: controller.signal, cache: 'no-store' })
    } catch (error) {
      if (!controller.signal.aborted) this.failedAttempt(new TowerSseClientError('could not connect', null, false, error), 'network-error')
      return
    }
    if (controller.signal.aborted) {
      void response.body?.cancel().catch(() => {})
      return
    }
    const verdict = classifyResponse(response.status, response.headers.get('content-type'))
    if (verdict.kind === 'stream') {
      await this.readStream(response, controller)
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
    this.failedAttempt(error, verdict.reason, retryAfterMs)
  }

  private async readStream (response: Response, controller: AbortController): Promise<void> {
    const openedAt = Date.now()
    this.setState({ kind: 'open', since: openedAt })
    this.dispatchEvent(new Event('open'))
    // A server refusing with rejectWith 'retry' sends a 200 stream with `event: refused` and ends it.
    let refused = false
    const parser = createParser({
      onEvent: (event) => {
        if (event.event === 'refused') refused = true
        this.deliver(event)
      },
      onRetry: (ms) => { this.reconnectMs = Math.min(ms, MAX_TIMER_MS) }
    })
    const decoder = new TextDecoder()
    let failure: unknown = null
    try {
      // A 200 always has a body; an empty one simply ends at once.
      const reader = (response.body as ReadableStream<Uint8Array>).getReader()
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        parser.feed(decoder.decode(value, { stream: true }))
      }
    } catch (error) {
      if (controller.signal.aborted) return
      failure = error
    }
    // Only a stream that stayed open a while proves the server healthy; a first 200 does not.
    if (Date.now() - openedAt >= this.options.healthyAfterMs) this.failures = 0
    const reconnectMs = Math.max(this.reconnectMs, this.options.minRetryMs)
    const retry = jitterUpMs(reconnectMs, this.options.retryJitterRatio, this.options.random)
    if (failure === null && refused) {
      this.failures++
      this.wait('refused', retry, new TowerSseClientError('the server refused the stream (event: refused)', response.status, false))
      return
    }
    if (failure === null) {
      // The server ended the stream (max age, shutdown): come back after its retry: value.
      this.wait('stream-ended', retry, null)
      return
    }
    this.failures++
    const backoff = backoffDelayMs(this.failures, this.options.random, this.options.backoffBaseMs, this.options.backoffCapMs)
    this.wait('network-error', Math.max(retry, backoff), new TowerSseClientError('the stream broke', null, false, failure))
  }

  private deliver (event: EventSourceMessage): void {
    // A listener may have closed the client while an earlier event of the same chunk was delivered.
    if (this.currentState.kind !== 'open') return
    // As in EventSource, an `id:` field (even empty) replaces the last event id.
    if (event.id !== undefined) this.lastId = event.id
    const message: TowerSseMessage = { type: event.event ?? 'message', data: event.data, lastEventId: this.lastId }
    for (const sink of this.sinks) sink.push(message)
    this.dispatchEvent(new MessageEvent(message.type, { data: message.data, lastEventId: message.lastEventId }))
  }

  /** A failed attempt: Retry-After when the server gave one, else exponential backoff. */
  private failedAttempt (error: TowerSseClientError, reason: WaitReason, retryAfterMs: number | null = null): void {
    this.failures++
    const delayMs = retryAfterMs !== null && retryAfterMs > 0
      ? jitterUpMs(retryAfterMs, this.options.retryAfterJitterRatio, this.options.random)
      : backoffDelayMs(this.failures, this.options.random, this.options.backoffBaseMs, this.options.backoffCapMs)
    this.wait(reason, delayMs, error)
  }

  /** Schedules the next attempt, then reports the state (and the error, so listeners see the wait). */
  private wait (reason: WaitReason, delayMs: number, error: TowerSseClientError | null): void {
    const ms = Math.min(delayMs, MAX_TIMER_MS)
    this.controller = null
    this.retryTimer = setTimeout(() => { void this.connect() }, ms)
    const status = error?.status ?? null
    this.setState({ kind: 'waiting', reason, retryAt: Date.now() + ms, delayMs: ms, status, failures: this.failures })
    if (error !== null && this.currentState.kind === 'waiting') this.dispatchEvent(new TowerSseErrorEvent(error))
  }

  private stop (error: TowerSseClientError | null): void {
    if (this.currentState.kind === 'closed') return
    clearTimeout(this.retryTimer)
    this.retryTimer = undefined
    this.controller?.abort()
    this.controller = null
    this.setState({ kind: 'closed', error })
    if (error !== null) this.dispatchEvent(new TowerSseErrorEvent(error))
    for (const sink of this.sinks) sink.end(error)
    this.sinks.clear()
  }

  private setState (state: TowerSseClientState): void {
    this.currentState = state
    this.dispatchEvent(new TowerSseStateEvent(state))
  }
}
