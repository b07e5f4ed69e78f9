/** The client's options: every default in one place, validated once in the constructor. */
import { describe } from '../shared/describe.ts'
import type { RandomSource } from '../shared/backoff.ts'

/** What a `headers` function is told about the attempt it is called for. */
export interface TowerSseAttempt {
  /** 1 for the first attempt after a healthy stream or the start, then one more per failed attempt. */
  readonly attempt: number
  /** The id sent as `Last-Event-ID` on this attempt ('' for none): the client sets that header itself. */
  readonly lastEventId: string
}

/** Extra request headers: fixed, or computed for every attempt (a fresh token), possibly async. */
export type TowerSseHeaders = Record<string, string> | ((attempt: TowerSseAttempt) => Record<string, string> | Promise<Record<string, string>>)

/** A request body the client can send again on every reconnect (a ReadableStream could be read only once). */
export type TowerSseBody = string | URLSearchParams | FormData | Blob | ArrayBuffer | ArrayBufferView

/**
 * Sees every response before the client judges it. `'retry'` makes an answer that would stop the
 * client for good (a 401 once a token is refreshed) a failed attempt, retried after the backoff.
 */
export type TowerSseOnResponse = (response: Response) => undefined | 'retry' | Promise<undefined | 'retry'>

export interface TowerSseClientOptions {
  /** Extra request headers (e.g. authorization), or a function called before every attempt. */
  headers?: TowerSseHeaders
  /** The request method: GET (as EventSource) or another, such as POST with a `body`. */
  method?: string
  /** The request body, sent again on every attempt; not with GET. */
  body?: TowerSseBody
  /** Called with every response before the client judges it (see TowerSseOnResponse). */
  onResponse?: TowerSseOnResponse
  /** The fetch to stream with; the global one by default. */
  fetch?: typeof globalThis.fetch
  /** As EventSource's `withCredentials`: send cookies cross-origin (fetch `credentials: 'include'`). */
  withCredentials?: boolean
  /**
   * Browsers: the tabs of one origin that open the same URL with the same headers share one stream
   * (one tab holds it and relays to the others). On by default for same-origin URLs.
   */
  shareAcrossTabs?: boolean
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
export const MAX_TIMER_MS = 2 ** 31 - 1
const NUMBER_RULES: Record<NumericOption, { min: number, max: number }> = {
  retryMs: { min: 0, max: MAX_TIMER_MS },
  minRetryMs: { min: 0, max: MAX_TIMER_MS },
  retryJitterRatio: { min: 0, max: 10 },
  retryAfterJitterRatio: { min: 0, max: 10 },
  backoffBaseMs: { min: 1, max: MAX_TIMER_MS },
  backoffCapMs: { min: 1, max: MAX_TIMER_MS },
  healthyAfterMs: { min: 0, max: Number.MAX_SAFE_INTEGER }
}
const BOOLEAN_OPTIONS = { withCredentials: false, shareAcrossTabs: true } as const
const KNOWN_OPTIONS = new Set<string>([
  ...Object.keys(CLIENT_DEFAULTS), ...Object.keys(BOOLEAN_OPTIONS), 'headers', 'method', 'body', 'onResponse', 'fetch', 'random', 'lastEventId'
])
// An HTTP method is a token (RFC 9110 §9.1). fetch refuses CONNECT, TRACE and TRACK; a HEAD
// response has no body, so the stream would end at once and reconnect forever.
const METHOD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/
const REFUSED_METHODS = new Set(['CONNECT', 'TRACE', 'TRACK', 'HEAD'])

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

export type NormalizedClientOptions = Record<NumericOption, number> & Record<keyof typeof BOOLEAN_OPTIONS, boolean> & {
  headers: TowerSseHeaders
  method: string
  body: TowerSseBody | undefined
  onResponse: TowerSseOnResponse | undefined
  fetch: typeof globalThis.fetch
  random: RandomSource
  lastEventId: string
}

export function normalizeClientOptions (input: TowerSseClientOptions | undefined): NormalizedClientOptions {
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
  const booleans = {} as Record<keyof typeof BOOLEAN_OPTIONS, boolean>
  for (const key of Object.keys(BOOLEAN_OPTIONS) as Array<keyof typeof BOOLEAN_OPTIONS>) {
    const value = given[key] ?? BOOLEAN_OPTIONS[key]
    if (typeof value !== 'boolean') throw new TowerSseClientOptionError(key, value, 'true or false')
    booleans[key] = value
  }
  const headers = given.headers ?? {}
  if (typeof headers !== 'function') checkHeaders('headers', headers)
  const method = given.method ?? 'GET'
  if (typeof method !== 'string' || !METHOD.test(method) || REFUSED_METHODS.has(method.toUpperCase())) {
    throw new TowerSseClientOptionError('method', method, 'an HTTP method other than HEAD, CONNECT, TRACE or TRACK (GET, POST, …)')
  }
  const body = given.body
  if (body !== undefined) {
    if (!isReplayableBody(body)) {
      throw new TowerSseClientOptionError('body', body, 'a string, URLSearchParams, FormData, Blob, ArrayBuffer or typed array (sent again on every reconnect)')
    }
    if (method.toUpperCase() === 'GET') throw new TowerSseClientOptionError('body', body, 'absent with method GET (fetch sends no body with GET)')
  }
  const onResponse = given.onResponse
  if (onResponse !== undefined && typeof onResponse !== 'function') {
    throw new TowerSseClientOptionError('onResponse', onResponse, 'a function (response) => undefined | \'retry\'')
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
    ...booleans,
    headers: headers as TowerSseHeaders,
    method,
    body,
    onResponse: onResponse as TowerSseOnResponse | undefined,
    fetch: fetchImpl as typeof globalThis.fetch,
    random: random as RandomSource,
    lastEventId
  }
}

/**
 * Checks a set of request headers as fetch would take them (names and values), so a bad one fails
 * where it was given instead of as a network error on every attempt. `where` names its source.
 */
export function checkHeaders (where: string, headers: unknown): Record<string, string> {
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers) || Object.values(headers).some((v) => typeof v !== 'string')) {
    throw new TowerSseClientOptionError(where, headers, 'an object of string header values')
  }
  try {
    void new Headers(headers as Record<string, string>)
  } catch (error) {
    throw new TowerSseClientOptionError(where, headers, `headers fetch accepts (${(error as Error).message})`)
  }
  return headers as Record<string, string>
}

function isReplayableBody (body: unknown): body is TowerSseBody {
  return typeof body === 'string' || body instanceof URLSearchParams || body instanceof ArrayBuffer || ArrayBuffer.isView(body) ||
    (typeof Blob === 'function' && body instanceof Blob) || (typeof FormData === 'function' && body instanceof FormData)
}
