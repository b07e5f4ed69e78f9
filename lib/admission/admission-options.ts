import { group, integer, TowerSseOptionError } from '../shared/option-rules'

/** How admission behaves while refusals pile up: delays widen and refusals are held. */
export interface StormOptions {
  /** Refusals in one second beyond which admission counts a storm. */
  refusalsPerSecond?: number
  /** During a storm each refusal is held this long (± 20%) before it is answered; 0: never held. */
  tarpitMs?: number
  /** The widest Retry-After (and storm-widened `retry:`, its jitter included) handed out, in seconds. */
  maxRetryAfterSeconds?: number
}

/** The connect-rate guard: admissions per second on average (a token bucket), `burst` at once. */
export interface ConnectRateOptions {
  perSecond: number
  /** Admissions allowed at once; default: perSecond. */
  burst?: number
}

/** Who may open a stream, and how a refusal is answered. */
export interface AdmissionOptions {
  /** Streams held open at once; the next one is refused, no live client is ever evicted. */
  maxClients?: number
  /** Streams one key (see keyFn) may hold; beyond it 429 + Retry-After. 0: no per-key limit. */
  maxClientsPerKey?: number
  /** Reconnection time sent as each stream's first frame (`retry:`, ± 20%), in ms. */
  retryMs?: number
  /** The low end of a refusal's `Retry-After` window ([w, 2w]), in whole seconds. */
  retryAfterSeconds?: number
  /**
   * How a refusal is answered: '503' (429 for the per-key limit) with Retry-After and a JSON body, or
   * 'retry': a 200 event stream carrying only `retry:` and then closed, for native EventSource pages.
   */
  rejectWith?: '503' | 'retry'
  /** Storm handling; false: delays never widen and no refusal is held. */
  storm?: StormOptions | false
  /** The connect-rate guard; absent or false: none. */
  connectRate?: ConnectRateOptions | false
}

export interface StormSettings {
  refusalsPerSecond: number
  tarpitMs: number
  maxRetryAfterSeconds: number
}

export interface AdmissionSettings {
  maxClients: number
  maxClientsPerKey: number
  retryMs: number
  retryAfterSeconds: number
  rejectWith: '503' | 'retry'
  storm: StormSettings | false
  connectRate: Required<ConnectRateOptions> | false
}

export const STORM_DEFAULTS: Readonly<StormSettings> = Object.freeze({ refusalsPerSecond: 5, tarpitMs: 5000, maxRetryAfterSeconds: 60 })

export const ADMISSION_DEFAULTS = Object.freeze({
  maxClients: 200,
  maxClientsPerKey: 0,
  retryMs: 5000,
  retryAfterSeconds: 5,
  rejectWith: '503' as '503' | 'retry',
  storm: STORM_DEFAULTS,
  connectRate: false as const
})

export const ADMISSION_OPTIONS = ['maxClients', 'maxClientsPerKey', 'retryMs', 'retryAfterSeconds', 'rejectWith', 'storm', 'connectRate'] as const

/** A refusal's delays must stay well inside what clients and timers take (an hour). */
const MAX_DELAY_SECONDS = 3600

export function parseAdmissionOptions (given: Record<string, unknown>): AdmissionSettings {
  const D = ADMISSION_DEFAULTS
  const retryAfterSeconds = integer('retryAfterSeconds', given.retryAfterSeconds, D.retryAfterSeconds, { min: 1, max: MAX_DELAY_SECONDS })
  const rejectWith = given.rejectWith ?? D.rejectWith
  if (rejectWith !== '503' && rejectWith !== 'retry') throw new TowerSseOptionError('rejectWith', rejectWith, 'either "503" or "retry"')
  return {
    maxClients: integer('maxClients', given.maxClients, D.maxClients, { min: 1 }),
    maxClientsPerKey: integer('maxClientsPerKey', given.maxClientsPerKey, D.maxClientsPerKey, { min: 0 }),
    retryMs: integer('retryMs', given.retryMs, D.retryMs, { min: 0, max: MAX_DELAY_SECONDS * 1000 }),
    retryAfterSeconds,
    rejectWith,
    storm: parseStorm(given.storm, retryAfterSeconds, given.retryAfterSeconds !== undefined),
    connectRate: parseConnectRate(given.connectRate)
  }
}

function parseStorm (value: unknown, retryAfterSeconds: number, retryAfterSet: boolean): StormSettings | false {
  if (value === false) return false
  const given = group('storm', value, Object.keys(STORM_DEFAULTS)) ?? {}
  const D = STORM_DEFAULTS
  const storm = {
    refusalsPerSecond: integer('storm.refusalsPerSecond', given.refusalsPerSecond, D.refusalsPerSecond, { min: 0 }),
    tarpitMs: integer('storm.tarpitMs', given.tarpitMs, D.tarpitMs, { min: 0, max: 60_000 }),
    maxRetryAfterSeconds: integer('storm.maxRetryAfterSeconds', given.maxRetryAfterSeconds, D.maxRetryAfterSeconds, { min: 1, max: MAX_DELAY_SECONDS })
  }
  if (storm.maxRetryAfterSeconds < retryAfterSeconds) {
    // Named as the one the user set: `{ retryAfterSeconds: 90 }` collides with the default bound.
    if (retryAfterSet && given.maxRetryAfterSeconds === undefined) {
      throw new TowerSseOptionError('retryAfterSeconds', retryAfterSeconds, `at most storm.maxRetryAfterSeconds (${storm.maxRetryAfterSeconds}, its default: set it too, or storm: false)`)
    }
    throw new TowerSseOptionError('storm.maxRetryAfterSeconds', storm.maxRetryAfterSeconds, `at least retryAfterSeconds (${retryAfterSeconds})`)
  }
  return storm
}

function parseConnectRate (value: unknown): Required<ConnectRateOptions> | false {
  if (value === false || value === undefined) return false
  const given = group('connectRate', value, ['perSecond', 'burst']) as Record<string, unknown>
  if (given.perSecond === undefined) throw new TowerSseOptionError('connectRate.perSecond', undefined, 'an integer >= 1 (connectRate: false turns the guard off)')
  const perSecond = integer('connectRate.perSecond', given.perSecond, 0, { min: 1 })
  return { perSecond, burst: integer('connectRate.burst', given.burst, perSecond, { min: 1 }) }
}
