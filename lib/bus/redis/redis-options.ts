import { group, integer, MAX_TIMER_MS, TowerSseOptionError } from '../../shared/option-rules'
import { parseRedisUrl, redactRedisUrl, RedisUrlError } from './url'

/**
 * An ioredis client or Cluster, seen structurally so the types need no ioredis (an optional peer
 * dependency). The app keeps owning it; the bus duplicates it for its blocking reader.
 */
export interface RedisClientLike {
  readonly status: string
  duplicate: (...args: never[]) => unknown
  evalsha: (...args: never[]) => unknown
}

/** The Redis bus with its settings: `redis: { url, key, … }` (or `client` in place of `url`). */
export interface RedisBusGroup {
  /** A redis://, rediss://, redis+sentinel:// or redis+cluster:// URL: the plugin opens and closes its connections. */
  url?: string
  /** …or an ioredis client or Cluster of yours: the plugin duplicates it for its reader and never closes it. */
  client?: RedisClientLike
  /** Prefix of the bus's keys, in a hash tag (`{<key>}:stream`, …): one per event stream sharing a Redis. */
  key?: string
  /** broadcast() settles within this many ms; Redis itself refuses a publish it would run later. */
  publishTimeoutMs?: number
  /** Publishes awaiting Redis at once; beyond it broadcast() is refused at once (TOWER_SSE_BUS_BUSY). */
  maxPendingPublishes?: number
  /**
   * Down this long without proof that this instance receives: every stream here gets a resync and
   * ends with a jittered retry; new streams are refused meanwhile.
   */
  deafCloseMs?: number
}

/** The `redis` option: a URL, a client, or either with the bus's settings. */
export type RedisOption = string | RedisClientLike | RedisBusGroup

export interface RedisSettings {
  /** A URL (the bus owns its connections) or the app's client. */
  connection: string | RedisClientLike
  key: string
  publishTimeoutMs: number
  maxPendingPublishes: number
  deafCloseMs: number
}

/** The settings of the Redis bus, applied when `redis` is given. */
export const REDIS_DEFAULTS = Object.freeze({
  key: 'tower-sse',
  publishTimeoutMs: 1000,
  maxPendingPublishes: 1000,
  deafCloseMs: 5000
})

const GROUP_KEYS = ['url', 'client', ...Object.keys(REDIS_DEFAULTS)]
const REDIS_KEY = /^[A-Za-z0-9_.:{}-]{1,100}$/
const ANY_FORM = 'a redis://, rediss://, redis+sentinel:// or redis+cluster:// URL, an ioredis client or Cluster, or { url | client, key, publishTimeoutMs, maxPendingPublishes, deafCloseMs }'

export function parseRedisOption (value: unknown): RedisSettings | undefined {
  if (value === undefined) return undefined
  if (typeof value === 'string' || isClient(value)) return { connection: connection('redis', value), ...REDIS_DEFAULTS }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TowerSseOptionError('redis', value, ANY_FORM)
  const given = group('redis', value, GROUP_KEYS) as Record<string, unknown>
  if ((given.url === undefined) === (given.client === undefined)) {
    throw new TowerSseOptionError('redis', value, 'an object with exactly one of url (a Redis URL) or client (an ioredis client or Cluster)')
  }
  const key = given.key ?? REDIS_DEFAULTS.key
  if (typeof key !== 'string' || !REDIS_KEY.test(key)) throw new TowerSseOptionError('redis.key', key, '1-100 characters of A-Z a-z 0-9 _ . : - { }')
  return {
    connection: given.url !== undefined ? connection('redis.url', given.url) : connection('redis.client', given.client),
    key,
    publishTimeoutMs: integer('redis.publishTimeoutMs', given.publishTimeoutMs, REDIS_DEFAULTS.publishTimeoutMs, { min: 1, max: 60_000 }),
    maxPendingPublishes: integer('redis.maxPendingPublishes', given.maxPendingPublishes, REDIS_DEFAULTS.maxPendingPublishes, { min: 1 }),
    deafCloseMs: integer('redis.deafCloseMs', given.deafCloseMs, REDIS_DEFAULTS.deafCloseMs, { min: 0, max: MAX_TIMER_MS })
  }
}

function isClient (value: unknown): value is RedisClientLike {
  const client = value as Partial<Record<keyof RedisClientLike, unknown>> | null
  return typeof client === 'object' && client !== null && typeof client.duplicate === 'function' &&
    typeof client.evalsha === 'function' && typeof client.status === 'string'
}

function connection (name: string, value: unknown): string | RedisClientLike {
  if (isClient(value)) return value
  if (typeof value !== 'string') throw new TowerSseOptionError(name, value, name === 'redis.client' ? 'an ioredis client or Cluster' : ANY_FORM)
  // Shown without the password a URL may carry.
  const shown = redactRedisUrl(value)
  try {
    parseRedisUrl(value)
  } catch (error) {
    if (!(error instanceof RedisUrlError)) throw error
    throw new TowerSseOptionError(name, shown, `${error.expected}, or an ioredis client or Cluster`)
  }
  try {
    require.resolve('ioredis')
  } catch {
    throw new TowerSseOptionError(name, shown, 'usable: install ioredis (an optional peer dependency of tower-sse)')
  }
  return value
}
