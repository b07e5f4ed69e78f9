/** The client's states, errors and events: what a tab's listeners see, whoever holds the stream. */

/**
 * Why the client is waiting: refused (503/429), server error (other 5xx), network error, stream
 * ended, the application's onResponse asked for a retry, or its headers/onResponse function failed.
 */
export type WaitReason = 'refused' | 'server-error' | 'network-error' | 'stream-ended' | 'retry-requested' | 'hook-error'

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

/**
 * Stable, to match on: TOWER_SSE_CLIENT_FATAL (stopped for good), _NETWORK (no response, or the
 * stream broke), _ENDED (the server ended a stream; reconnecting), _REFUSED (503/429, or a refusal
 * stream), _HTTP (another status worth a retry), _HOOK (the application's headers or onResponse
 * function threw; retried after the backoff), _SERVER_ERROR (the server's own `event: error` with a
 * TOWER_SSE_ code, in `serverCode`: the answer failed, and asking again would fail again; stopped for good).
 */
export type TowerSseClientErrorCode =
  'TOWER_SSE_CLIENT_FATAL' | 'TOWER_SSE_CLIENT_NETWORK' | 'TOWER_SSE_CLIENT_ENDED' | 'TOWER_SSE_CLIENT_REFUSED' | 'TOWER_SSE_CLIENT_HTTP' |
  'TOWER_SSE_CLIENT_HOOK' | 'TOWER_SSE_CLIENT_SERVER_ERROR'

function codeFor (status: number | null, fatal: boolean): TowerSseClientErrorCode {
  if (fatal) return 'TOWER_SSE_CLIENT_FATAL'
  if (status === null) return 'TOWER_SSE_CLIENT_NETWORK'
  // A 200 that is a failure is the plugin's refusal stream (rejectWith 'retry').
  return status === 503 || status === 429 || status === 200 ? 'TOWER_SSE_CLIENT_REFUSED' : 'TOWER_SSE_CLIENT_HTTP'
}

/** A failed attempt, the end of a stream, or the reason the client stopped for good (`fatal`). */
export class TowerSseClientError extends Error {
  readonly code: TowerSseClientErrorCode
  /** The HTTP status, or null when no response came (network error) or a stream ended. */
  readonly status: number | null
  readonly fatal: boolean
  /** The code of the server's own `event: error` (TOWER_SSE_STREAM_FAILED, …) with TOWER_SSE_CLIENT_SERVER_ERROR; else null. */
  readonly serverCode: string | null
  constructor (message: string, status: number | null, fatal: boolean, cause?: unknown, code = codeFor(status, fatal), serverCode: string | null = null) {
    super(`tower-sse/client: ${message}${describeCause(cause)}`, cause === undefined ? undefined : { cause })
    this.name = 'TowerSseClientError'
    this.code = code
    this.status = status
    this.fatal = fatal
    this.serverCode = serverCode
  }
}

/** An error as it crosses to another tab: structured clone keeps an Error's message, not its class. */
export interface ErrorRecord { message: string, code: TowerSseClientErrorCode, status: number | null, fatal: boolean, serverCode: string | null }

export function errorRecord (error: TowerSseClientError): ErrorRecord {
  return { message: error.message, code: error.code, status: error.status, fatal: error.fatal, serverCode: error.serverCode }
}

export function reviveError (record: ErrorRecord): TowerSseClientError {
  const error = new TowerSseClientError('', record.status, record.fatal, undefined, record.code, record.serverCode)
  error.message = record.message
  return error
}

// fetch's errors are generic ("fetch failed", "terminated"); the code underneath says what happened.
function describeCause (cause: unknown): string {
  if (!(cause instanceof Error)) return ''
  const code = (cause.cause as { code?: unknown } | undefined)?.code
  return `: ${cause.message}${typeof code === 'string' ? ` (${code})` : ''}`
}

/**
 * Fired as `error` whenever EventSource would: before every reconnect, and once when the client
 * stops for good. The error's `code`, `status`, `fatal` and `serverCode` are on the event too. (A
 * server's own `event: error` arrives first as a MessageEvent of type `error`, as with EventSource.)
 */
export class TowerSseErrorEvent extends Event {
  constructor (readonly error: TowerSseClientError) {
    super('error')
  }

  get code (): TowerSseClientErrorCode { return this.error.code }
  get status (): number | null { return this.error.status }
  get fatal (): boolean { return this.error.fatal }
  get serverCode (): string | null { return this.error.serverCode }
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

/** A server event as the wire hands it over (and a leader tab relays it): the message and its origin. */
export interface WireMessage extends TowerSseMessage {
  /** The event's own `id:` field, if it had one (tabs drop an event whose id they already saw). */
  readonly id: string | undefined
  /** The origin of the response's final URL (after redirects), as MessageEvent.origin. */
  readonly origin: string
}
