import type { FastifyRequest } from 'fastify'
import type { RandomSource } from './shared/jitter'
import type { TopicsFromRequest } from './stream/stream-request'
import type { ALL_TOPICS } from './events/topic'
import { defaultKeyFn, type KeyFn } from './admission/request-key'
import { TowerSseOptionError } from './errors'
import { parseRedisUrl, redactRedisUrl, RedisUrlError } from './bus/redis/url'
import { monotonicNow } from './shared/monotonic'
import { parseAllowedHost } from './admission/request-guard'

export { TowerSseOptionError }

/** One event as the application describes it; `data` that is not a string is sent as JSON. */
export interface SseEventInit {
  data: unknown
  /** The `event:` field (event type); omitted means a plain `message`. */
  event?: string
}

/** Builds a new client's first event, before any byte of its stream is written (undefined: none). */
export type InitialEvent = (client: SseClientInfo, request: FastifyRequest) => SseEventInit | undefined | PromiseLike<SseEventInit | undefined>

/** What the registry tells the outside world about one connected client. */
export interface SseClientInfo {
  readonly id: string
  /** Epoch milliseconds at which the stream was opened. */
  readonly connectedAt: number
  /** Epoch milliseconds at which the server will end the stream, or null without a max age. */
  readonly expiresAt: number | null
  readonly remoteAddress: string | undefined
  /** Whose stream this is (keyFn or subscribe's `key`): `fastify.sse.sendToKey` and `closeKey` address it. */
  readonly key: string
  /** The topics granted beyond the untopiced events, or ALL_TOPICS. */
  readonly topics: readonly string[] | typeof ALL_TOPICS
}

/**
 * An ioredis client, seen structurally so the types need no ioredis (an optional peer dependency).
 * The app keeps owning it; the bus duplicates it for its blocking reader.
 */
export interface RedisClientLike {
  readonly status: string
  duplicate: (...args: never[]) => unknown
  evalsha: (...args: never[]) => unknown
}

/**
 * A prom-client Registry (`new Registry()` or `register`), seen structurally so the types need no
 * prom-client (an optional peer dependency); register time checks the same shape.
 */
export interface MetricsRegistryLike {
  registerMetric: (...args: never[]) => unknown
  getSingleMetric: (...args: never[]) => unknown
  removeSingleMetric: (...args: never[]) => unknown
  metrics: (...args: never[]) => unknown
}

export interface TowerSseOptions {
  /**
   * Path of the stream route the plugin adds (GET and HEAD); false adds none, for an app that
   * makes its own routes streams (the route option `eventStream`).
   */
  path?: string | false
  /** Streams held open at once; the next one is refused, no live client is ever evicted. */
  maxClients?: number
  /** Reconnection time sent as the first frame (`retry:`), in ms. */
  retryMs?: number
  /** Each client's `retry:` is drawn uniformly from retryMs ± retryJitterMs. */
  retryJitterMs?: number
  /** `Retry-After` on a refusal, in whole seconds. */
  retryAfterSeconds?: number
  /** Period of the one shared heartbeat timer (comment frame + dead-client sweep), in ms. */
  heartbeatMs?: number
  /** Lifetime of a stream before the server ends it, in ms; 0 disables expiry. */
  maxAgeMs?: number
  /** Each client's lifetime is drawn uniformly from maxAgeMs ± maxAgeJitterMs. */
  maxAgeJitterMs?: number
  /** Length of one summary-log window, in ms. */
  logIntervalMs?: number
  /** Unsent bytes a client may have queued before it is dropped as too slow. */
  maxBufferedBytes?: number
  /** Heartbeats a backpressured client may miss before it is swept as dead. */
  maxStalledHeartbeats?: number
  /** How a refusal is answered: '503' (429 for the per-key limit) with Retry-After and a JSON body, or
   * 'retry': a 200 event stream carrying only `retry:` and then closed, for native EventSource pages. */
  rejectWith?: '503' | 'retry'
  /** Upper bound of the Retry-After (and storm-widened `retry:`) window, in seconds. */
  maxRetryAfterSeconds?: number
  /** Refusals per second above which admission counts a storm: delays widen and refusals are held. */
  stormRefusalsPerSecond?: number
  /** During a storm each refusal is held tarpitMs ± tarpitJitterMs before it is answered; 0 disables. */
  tarpitMs?: number
  tarpitJitterMs?: number
  /** At most this many refusals are held at once; beyond it they are answered at once. */
  maxHeldRefusals?: number
  /** Streams one client (see keyFn) may hold; beyond it 429 + Retry-After. 0: no per-key limit. */
  maxClientsPerKey?: number
  /** Who a request belongs to for maxClientsPerKey and the storm report. */
  keyFn?: KeyFn
  /** Connect-rate guard: admissions per second (token bucket); 0 disables. */
  maxConnectsPerSecond?: number
  /** Admissions allowed at once by the rate guard; 0 means maxConnectsPerSecond. */
  connectBurst?: number
  /** Shutdown ends the streams in staggered batches over this many ms. */
  drainMs?: number
  /** Attempts per minute from which a log window is reported as a storm (warn, busiest keys). */
  stormConnectsPerMinute?: number
  /** Broadcasts kept for Last-Event-ID replay, by count; 0 keeps none (every resume resyncs). */
  historyMaxEvents?: number
  /** …and by total frame bytes (the newest event is always kept). */
  historyMaxBytes?: number
  /**
   * The topics a request is granted beyond the untopiced events: null or undefined grants none,
   * ALL_TOPICS every one; absent: none. `topicsFromQuery({ allow })` lets clients ask in `?topics=`.
   */
  topicsFromRequest?: TopicsFromRequest
  /** The first event a new client receives (Tower sends `{"type":"connected","id":…}`); it may be async. */
  initialEvent?: InitialEvent
  /** Uniform random source for every jitter; replace it only to make tests repeatable. */
  random?: RandomSource
  /**
   * Milliseconds on a clock that never steps, for every interval admission measures (storm
   * seconds, the connect-rate bucket) and the memory bus's idempotency window; replace it only
   * to move time by hand in a test. Default: performance.now.
   */
  monotonicNow?: () => number
  /** The clock subscribe()'s `expiresAt` is read against (epoch ms); replace it only in tests. */
  now?: () => number
  /** A prom-client Registry to expose the plugin's metrics in; absent, prom-client is never loaded. */
  metrics?: MetricsRegistryLike
  /**
   * The Redis bus: a `redis://` / `rediss://` URL, a Sentinel URL
   * (`redis+sentinel://host:port,host:port/mastername`, see docs/bus-operations.md) or an ioredis client. Every instance given the
   * same Redis shares broadcasts, ids and history. Omitted: the in-memory bus (one process).
   */
  redis?: string | RedisClientLike
  /** Prefix of the Redis keys (`<redisKey>:stream`, `<redisKey>:meta`, `<redisKey>:idem:*`): one per event stream. */
  redisKey?: string
  /** broadcast() settles within this many ms; Redis itself refuses a publish it would run later. */
  publishTimeoutMs?: number
  /** Publishes awaiting Redis at once; beyond it broadcast() is refused at once (TOWER_SSE_BUS_BUSY). */
  maxPendingPublishes?: number
  /**
   * With the Redis bus: the publishes of one turn of the event loop go to Redis in one pipeline,
   * at most this many per pipeline (1: each publish on its own).
   */
  maxPublishBatch?: number
  /** How long an idempotencyKey of broadcast() is remembered: a retry within it lands no second event. */
  idempotencyWindowMs?: number
  /**
   * With the Redis bus: once the bus has been down this long without proof that this instance
   * receives, every stream here gets a resync and ends with a jittered retry (again each such spell).
   */
  busDeafCloseMs?: number
  /** Hosts the stream route answers (`name`, `*.domain`, an IP, `*`); any other Host → 403. Absent: any. */
  allowedHosts?: readonly string[]
  /** Exact origins (`https://app.example:8443`) whose pages may open the stream; another Origin → 403. Absent: any. */
  allowedOrigins?: readonly string[]
}

type OptionalHooks = 'initialEvent' | 'topicsFromRequest' | 'metrics' | 'redis' | 'allowedHosts' | 'allowedOrigins'
export type NormalizedOptions = Required<Omit<TowerSseOptions, OptionalHooks>> & Pick<TowerSseOptions, OptionalHooks>

/** Every default in one place; the README's options table mirrors this object. */
export const DEFAULTS = Object.freeze({
  path: '/api/events' as string | false,
  maxClients: 200,
  retryMs: 5000,
  retryJitterMs: 1000,
  retryAfterSeconds: 5,
  heartbeatMs: 30_000,
  maxAgeMs: 300_000,
  maxAgeJitterMs: 60_000,
  logIntervalMs: 30_000,
  maxBufferedBytes: 1024 * 1024,
  maxStalledHeartbeats: 2,
  historyMaxEvents: 1000,
  historyMaxBytes: 1024 * 1024,
  rejectWith: '503' as '503' | 'retry',
  maxRetryAfterSeconds: 60,
  stormRefusalsPerSecond: 5,
  tarpitMs: 5000,
  tarpitJitterMs: 1500,
  maxHeldRefusals: 1000,
  maxClientsPerKey: 0,
  maxConnectsPerSecond: 0,
  connectBurst: 0,
  drainMs: 500,
  stormConnectsPerMinute: 1000,
  redisKey: 'tower-sse',
  publishTimeoutMs: 1000,
  maxPendingPublishes: 1000,
  maxPublishBatch: 100,
  idempotencyWindowMs: 300_000,
  busDeafCloseMs: 5000
})

type IntegerRule = { min: number, max?: number }
const INTEGER_RULES: Record<Exclude<keyof typeof DEFAULTS, 'path' | 'rejectWith' | 'redisKey'>, IntegerRule> = {
  maxClients: { min: 1 },
  retryMs: { min: 0 },
  retryJitterMs: { min: 0 },
  retryAfterSeconds: { min: 1 },
  heartbeatMs: { min: 1, max: 2 ** 31 - 1 },
  maxAgeMs: { min: 0, max: 2 ** 31 - 1 },
  maxAgeJitterMs: { min: 0 },
  logIntervalMs: { min: 1, max: 2 ** 31 - 1 },
  maxBufferedBytes: { min: 1 },
  maxStalledHeartbeats: { min: 1 },
  historyMaxEvents: { min: 0 },
  historyMaxBytes: { min: 0 },
  maxRetryAfterSeconds: { min: 1 },
  stormRefusalsPerSecond: { min: 0 },
  tarpitMs: { min: 0, max: 60_000 },
  tarpitJitterMs: { min: 0 },
  maxHeldRefusals: { min: 0 },
  maxClientsPerKey: { min: 0 },
  maxConnectsPerSecond: { min: 0 },
  connectBurst: { min: 0 },
  drainMs: { min: 0, max: 60_000 },
  stormConnectsPerMinute: { min: 1 },
  publishTimeoutMs: { min: 1, max: 60_000 },
  maxPendingPublishes: { min: 1 },
  maxPublishBatch: { min: 1, max: 10_000 },
  idempotencyWindowMs: { min: 1, max: 2 ** 31 - 1 },
  busDeafCloseMs: { min: 0, max: 2 ** 31 - 1 }
}

// What a URL path carries unencoded (RFC 3986 pchar), less `%` and `*`. Fastify matches a route
// against the decoded path, so a route with `%`, `?` or `#` in it, or a `.`/`..` segment, is never
// reached; `*` would make it a wildcard; a space or non-ASCII character is sent encoded by every client.
const URL_PATH = /^\/[A-Za-z0-9\-._~!$&'()+,;=:@/]*$/

const HOOKS = ['initialEvent', 'topicsFromRequest', 'keyFn', 'random', 'monotonicNow', 'now'] as const
const KNOWN = new Set<string>([...Object.keys(DEFAULTS), ...HOOKS, 'metrics', 'redis', 'allowedHosts', 'allowedOrigins'])
const REDIS_KEY = /^[A-Za-z0-9_.:{}-]{1,100}$/

function integer (name: string, value: unknown, rule: IntegerRule): number {
  const ok = typeof value === 'number' && Number.isSafeInteger(value) && value >= rule.min &&
    (rule.max === undefined || value <= rule.max)
  if (!ok) {
    const range = rule.max === undefined ? `>= ${rule.min}` : `between ${rule.min} and ${rule.max}`
    throw new TowerSseOptionError(name, value, `an integer ${range}`)
  }
  return value as number
}

/** Applies defaults and checks every option and every combination, once, at register time. */
export function normalizeOptions (input: TowerSseOptions | undefined): NormalizedOptions {
  const given: Record<string, unknown> = { ...(input ?? {}) }
  for (const key of Object.keys(given)) {
    if (!KNOWN.has(key) && !isFastifyRegisterOption(key)) {
      throw new TowerSseOptionError(key, given[key], `one of the known options (${[...KNOWN].join(', ')})`)
    }
  }
  const pick = (key: keyof typeof DEFAULTS): unknown => given[key] === undefined ? DEFAULTS[key] : given[key]

  const path = pick('path')
  if (path !== false && (typeof path !== 'string' || !URL_PATH.test(path) || path.split('/').some((segment) => segment === '.' || segment === '..'))) {
    throw new TowerSseOptionError('path', path, 'a URL path as sent on the wire: "/" then A-Z a-z 0-9 and - . _ ~ ! $ & \' ( ) + , ; = : @ / ' +
      '(no space, ?, #, %, *, non-ASCII, or "." and ".." segments)')
  }
  const numbers = {} as Numbers
  for (const key of Object.keys(INTEGER_RULES) as Array<keyof typeof INTEGER_RULES>) {
    numbers[key] = integer(key, pick(key), INTEGER_RULES[key])
  }
  const rejectWith = pick('rejectWith')
  if (rejectWith !== '503' && rejectWith !== 'retry') {
    throw new TowerSseOptionError('rejectWith', rejectWith, 'either "503" or "retry"')
  }
  const pair = related(given, numbers)
  pair('maxRetryAfterSeconds', 'at least', 'retryAfterSeconds', 'at most', (n) => n.maxRetryAfterSeconds >= n.retryAfterSeconds)
  pair('tarpitJitterMs', 'less than', 'tarpitMs', '0 or more than', (n) => n.tarpitMs === 0 || n.tarpitJitterMs < n.tarpitMs)
  pair('retryJitterMs', 'at most', 'retryMs', 'at least', (n) => n.retryJitterMs <= n.retryMs)
  pair('maxAgeJitterMs', 'less than', 'maxAgeMs', '0 or more than', (n) => n.maxAgeMs === 0 || n.maxAgeJitterMs < n.maxAgeMs)
  pair('maxAgeJitterMs', 'small enough to fit a timer (2^31 - 1 ms) when added to', 'maxAgeMs', 'small enough to fit a timer (2^31 - 1 ms) when added to',
    (n) => n.maxAgeMs + n.maxAgeJitterMs <= 2 ** 31 - 1)
  const redisKey = pick('redisKey')
  if (typeof redisKey !== 'string' || !REDIS_KEY.test(redisKey)) {
    throw new TowerSseOptionError('redisKey', redisKey, '1-100 characters of A-Z a-z 0-9 _ . : - { }')
  }
  const hook = <T>(name: typeof HOOKS[number], expected: string): T | undefined => {
    const value = given[name]
    if (value !== undefined && typeof value !== 'function') throw new TowerSseOptionError(name, value, expected)
    return value as T | undefined
  }
  return {
    path,
    rejectWith,
    metrics: metricsRegistry(given.metrics),
    redisKey,
    redis: redisOption(given.redis),
    allowedHosts: list('allowedHosts', given.allowedHosts, (entry) => parseAllowedHost(entry) !== null,
      'host names, IP addresses, *.domain or * (no port)'),
    allowedOrigins: list('allowedOrigins', given.allowedOrigins, isExactOrigin, 'exact origins: scheme://host[:port], no path'),
    ...numbers,
    initialEvent: hook<InitialEvent>('initialEvent', 'a function (client, request) => event'),
    topicsFromRequest: hook<TopicsFromRequest>('topicsFromRequest', 'a function (request) => topics'),
    keyFn: hook<KeyFn>('keyFn', 'a function (request) => string') ?? defaultKeyFn,
    random: hook<RandomSource>('random', 'a function returning a number in [0, 1)') ?? Math.random,
    monotonicNow: hook<() => number>('monotonicNow', 'a function returning milliseconds') ?? monotonicNow,
    now: hook<() => number>('now', 'a function returning epoch milliseconds') ?? Date.now
  }
}

type Numbers = Record<keyof typeof INTEGER_RULES, number>

/**
 * A rule between two options. The error names the one the user set — `{ maxAgeMs: 60000 }` is
 * refused as maxAgeMs, not as the maxAgeJitterMs default it collides with — and says when the
 * other value is a default. With both set (or neither), the dependent one (`a`) is named.
 */
function related (given: Record<string, unknown>, numbers: Numbers): (a: keyof Numbers, aMust: string, b: keyof Numbers, bMust: string, holds: (n: Numbers) => boolean) => void {
  const set = (key: string): boolean => given[key] !== undefined
  return (a: keyof Numbers, aMust: string, b: keyof Numbers, bMust: string, holds: (n: Numbers) => boolean): void => {
    if (holds(numbers)) return
    const [name, must, other] = set(b) && !set(a) ? [b, bMust, a] : [a, aMust, b]
    const note = set(other) ? '' : `, its default: set ${other} too`
    throw new TowerSseOptionError(name, numbers[name], `${must} ${other} (${numbers[other]}${note})`)
  }
}

/** An origin as a browser sends it: `new URL()` gives it back unchanged (lower case, no default port, no path). */
function isExactOrigin (entry: string): boolean {
  try {
    const { origin } = new URL(entry)
    return origin !== 'null' && origin === entry
  } catch {
    return false
  }
}

function list (name: string, value: unknown, ok: (entry: string) => boolean, expected: string): readonly string[] | undefined {
  if (value === undefined) return undefined
  const bad = Array.isArray(value) ? value.find((entry) => typeof entry !== 'string' || !ok(entry)) : value
  if (!Array.isArray(value) || bad !== undefined || value.length === 0) {
    throw new TowerSseOptionError(name, Array.isArray(value) && bad !== undefined ? bad : value, `a non-empty array of ${expected}`)
  }
  return Object.freeze([...value as string[]])
}

// Checked by shape, not instanceof: the application's prom-client may be another copy than ours.
const REGISTRY_METHODS = ['registerMetric', 'getSingleMetric', 'removeSingleMetric', 'metrics'] as const satisfies ReadonlyArray<keyof MetricsRegistryLike>

function metricsRegistry (value: unknown): MetricsRegistryLike | undefined {
  if (value === undefined) return undefined
  const candidate = value as Record<string, unknown> | null
  if (typeof candidate !== 'object' || candidate === null || !REGISTRY_METHODS.every((name) => typeof candidate[name] === 'function')) {
    throw new TowerSseOptionError('metrics', value, 'a prom-client Registry (new Registry() or register)')
  }
  return value as MetricsRegistryLike
}

function redisOption (value: unknown): string | RedisClientLike | undefined {
  if (value === undefined) return undefined
  if (typeof value === 'string') {
    // Shown without the password a URL may carry.
    const shown = redactRedisUrl(value)
    try {
      parseRedisUrl(value)
    } catch (error) {
      if (!(error instanceof RedisUrlError)) throw error
      throw new TowerSseOptionError('redis', shown, `${error.expected}, or an ioredis client or Cluster`)
    }
    try {
      require.resolve('ioredis')
    } catch {
      throw new TowerSseOptionError('redis', shown, 'usable: install ioredis (an optional peer dependency of tower-sse)')
    }
    return value
  }
  const client = value as Partial<Record<keyof RedisClientLike, unknown>> | null
  if (typeof client !== 'object' || client === null || typeof client.duplicate !== 'function' ||
    typeof client.evalsha !== 'function' || typeof client.status !== 'string') {
    throw new TowerSseOptionError('redis', value, 'a redis://, rediss://, redis+sentinel:// or redis+cluster:// URL, or an ioredis client or Cluster')
  }
  return value as RedisClientLike
}

// Fastify passes its own register options (prefix, logLevel, …) through to the plugin.
function isFastifyRegisterOption (key: string): boolean {
  return key === 'prefix' || key === 'logLevel' || key === 'logSerializers'
}
