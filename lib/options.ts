import { ADMISSION_DEFAULTS, ADMISSION_OPTIONS, parseAdmissionOptions, type AdmissionOptions, type AdmissionSettings } from './admission/admission-options'
import { parseGuard, type StreamGuardOptions } from './admission/request-guard'
import { HISTORY_DEFAULTS, parseHistoryOptions, type HistoryOptions, type HistorySettings } from './events/history-options'
import { parseRedisOption, REDIS_DEFAULTS, type RedisOption, type RedisSettings } from './bus/redis/redis-options'
import { parseMetricsOption, type MetricsRegistryLike } from './observe/metrics-option'
import { LOG_INTERVAL_DEFAULT_MS, parseLogInterval } from './observe/activity-log'
import { parseRouteOptions, ROUTE_DEFAULTS, ROUTE_HOOKS, type RouteOptions, type RouteSettings } from './route/route-options'
import { parseStreamOptions, STREAM_DEFAULTS, STREAM_OPTIONS, type StreamOptions, type StreamSettings } from './streams/stream-options'
import { REAL_CLOCKS, type Clocks } from './shared/clocks'
import { optionalFunction, suggestion, TowerSseOptionError } from './shared/option-rules'

/**
 * The plugin's options: twenty keys, grouped by concern. Each concern owns its options' type,
 * defaults and parser; this file composes them and checks what no single concern can.
 */
export interface TowerSseOptions extends RouteOptions, AdmissionOptions, StreamOptions {
  /** What is remembered of past broadcasts: `{ events, bytes, idempotencyWindowMs }`. */
  history?: HistoryOptions
  /**
   * The Redis bus (several instances share broadcasts, ids and history): a URL, an ioredis client or
   * Cluster, or `{ url | client, key, publishTimeoutMs, maxPendingPublishes, deafCloseMs }`. Absent: the
   * in-memory bus of one process.
   */
  redis?: RedisOption
  /** The Host and Origin allowlists of the stream routes (`streamGuard()` is the same check for your routes). */
  guard?: StreamGuardOptions
  /** A prom-client Registry to expose the plugin's metrics in; absent, prom-client is never loaded. */
  metrics?: MetricsRegistryLike
  /** Length of one summary-log window, in ms: one line per window in which anything happened. */
  logIntervalMs?: number
}

/** Every option, normalised once at register time: what each concern is handed. */
export interface NormalizedOptions extends RouteSettings, AdmissionSettings, StreamSettings {
  history: HistorySettings
  redis: RedisSettings | undefined
  guard: StreamGuardOptions
  metrics: MetricsRegistryLike | undefined
  logIntervalMs: number
  clocks: Clocks
}

/** Every default in one place, by group; `redis` holds the Redis bus's, applied when `redis` is set. */
export const DEFAULTS = Object.freeze({
  ...ROUTE_DEFAULTS,
  ...ADMISSION_DEFAULTS,
  ...STREAM_DEFAULTS,
  history: HISTORY_DEFAULTS,
  redis: REDIS_DEFAULTS,
  logIntervalMs: LOG_INTERVAL_DEFAULT_MS
})

/**
 * Where the test seams travel: `withTestClocks()` of `tower-sse/testing` sets it, so clocks are no
 * public option. `Symbol.for`: the ESM and CommonJS copies of the package agree on it.
 */
export const TEST_CLOCKS = Symbol.for('tower-sse.test-clocks')

const KNOWN: readonly string[] = [...ROUTE_HOOKS, 'path', ...ADMISSION_OPTIONS, ...STREAM_OPTIONS, 'history', 'redis', 'guard', 'metrics', 'logIntervalMs']

/** The names of earlier versions, and where each went: a user upgrading is told. */
const MOVED: Readonly<Record<string, string>> = Object.freeze({
  historyMaxEvents: 'moved to history: { events }',
  historyMaxBytes: 'moved to history: { bytes }',
  idempotencyWindowMs: 'moved to history: { idempotencyWindowMs }',
  stormRefusalsPerSecond: 'moved to storm: { refusalsPerSecond }',
  tarpitMs: 'moved to storm: { tarpitMs }',
  maxRetryAfterSeconds: 'moved to storm: { maxRetryAfterSeconds }',
  maxConnectsPerSecond: 'moved to connectRate: { perSecond }',
  connectBurst: 'moved to connectRate: { burst }',
  redisKey: 'moved to redis: { url, key }',
  publishTimeoutMs: 'moved to redis: { url, publishTimeoutMs }',
  maxPendingPublishes: 'moved to redis: { url, maxPendingPublishes }',
  busDeafCloseMs: 'moved to redis: { url, deafCloseMs }',
  allowedHosts: 'moved to guard: { allowedHosts }',
  allowedOrigins: 'moved to guard: { allowedOrigins }',
  retryJitterMs: 'gone: every delay is jittered ±20%',
  maxAgeJitterMs: 'gone: every delay is jittered ±20%',
  tarpitJitterMs: 'gone: every delay is jittered ±20%',
  maxStalledHeartbeats: 'gone: a backpressured stream is swept after 2 heartbeats without progress',
  maxHeldRefusals: 'gone: at most 1000 refusals are held at once',
  stormConnectsPerMinute: 'gone: a log window is a storm from 1000 attempts a minute',
  maxPublishBatch: 'gone: each publish is one call to Redis',
  random: 'moved to withTestClocks() of tower-sse/testing',
  monotonicNow: 'moved to withTestClocks() of tower-sse/testing',
  now: 'moved to withTestClocks() of tower-sse/testing'
})

// Fastify passes its own register options (prefix, logLevel, …) through to the plugin.
const FASTIFY_REGISTER_OPTIONS = ['prefix', 'logLevel', 'logSerializers']

/** Applies defaults and checks every option and every combination, once, at register time. */
export function normalizeOptions (input: TowerSseOptions | undefined): NormalizedOptions {
  const given: Record<string, unknown> = { ...(input ?? {}) }
  for (const key of Object.keys(given)) {
    if (!KNOWN.includes(key) && !FASTIFY_REGISTER_OPTIONS.includes(key)) {
      throw new TowerSseOptionError(key, given[key], `one of tower-sse's options${suggestion(key, KNOWN, MOVED)}`)
    }
  }
  return {
    ...parseRouteOptions(given),
    ...parseAdmissionOptions(given),
    ...parseStreamOptions(given),
    history: parseHistoryOptions(given.history),
    redis: parseRedisOption(given.redis),
    guard: parseGuard(given.guard),
    metrics: parseMetricsOption(given.metrics),
    logIntervalMs: parseLogInterval(given.logIntervalMs),
    clocks: testClocks((input as Record<symbol, unknown> | undefined)?.[TEST_CLOCKS])
  }
}

function testClocks (value: unknown): Clocks {
  if (value === undefined) return REAL_CLOCKS
  const given = value as Partial<Record<keyof Clocks, unknown>>
  return {
    random: optionalFunction('withTestClocks: random', given.random, 'a function returning a number in [0, 1)') ?? REAL_CLOCKS.random,
    monotonicNow: optionalFunction('withTestClocks: monotonicNow', given.monotonicNow, 'a function returning milliseconds') ?? REAL_CLOCKS.monotonicNow,
    now: optionalFunction('withTestClocks: now', given.now, 'a function returning epoch milliseconds') ?? REAL_CLOCKS.now
  }
}
