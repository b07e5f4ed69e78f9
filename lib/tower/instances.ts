import { hostname } from 'node:os'
import { randomBytes } from 'node:crypto'
import type { SseStats } from '..'
import { backoffDelayMs, type RandomSource } from '../shared/backoff'
import { createRedisConnection, disconnectQuietly, RESTART_ATTEMPT, restartWhenEnded, type RedisConnection } from '../bus/redis/connection'
import { keyPrefix } from '../bus/redis/keys'
import { withTimeout } from './time-bound'

/** One Tower instance as the cluster sees it, refreshed every second through Redis. */
export interface InstanceStats {
  id: string
  host: string
  pid: number
  current: number
  peak: number
  accepted: number
  rejected: number
  bus: SseStats['bus']['state']
  /** Epoch ms of its last report; an instance silent for TTL_MS drops out of the list. */
  seenAt: number
}

const TTL_MS = 3000
/** Reconnects to Redis back off from 200 ms to 2 s: a report a second only needs it back soon. */
const RECONNECT_BASE_MS = 200
const RECONNECT_CAP_MS = 2000
const CLOSE_TIMEOUT_MS = 500

const COUNTS = ['pid', 'current', 'peak', 'accepted', 'rejected', 'seenAt'] as const

/**
 * An entry read back from Redis, or null when it is not one an instance writes: any client of that
 * Redis can write the key, and one bad entry must not fail the stats route for every instance.
 */
function parseInstance (text: string): InstanceStats | null {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return null
  }
  if (typeof value !== 'object' || value === null) return null
  const entry = value as Record<string, unknown>
  const valid = typeof entry.id === 'string' && typeof entry.host === 'string' && (entry.bus === 'up' || entry.bus === 'down' || entry.bus === 'oom') &&
    COUNTS.every((name) => Number.isSafeInteger(entry[name]) && (entry[name] as number) >= 0)
  if (!valid) return null
  const { id, host, pid, current, peak, accepted, rejected, bus, seenAt } = entry as unknown as InstanceStats
  return { id, host, pid, current, peak, accepted, rejected, bus, seenAt }
}

/**
 * Per-instance counts for the stats route, aggregated through the Redis every instance already
 * shares (so it works across machines, not only under node:cluster): each instance keeps one key
 * with a TTL and its id in a set; readers drop the ids whose key expired.
 */
export class InstanceBoard {
  readonly id = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`
  private readonly redis: RedisConnection
  private readonly setKey: string
  private readonly stopRestart: () => void

  constructor (url: string, private readonly key: string, private readonly read: () => SseStats, random: RandomSource) {
    // No offline queue: while Redis is down a report fails at once and the next one tries again.
    this.redis = createRedisConnection(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: (n) => backoffDelayMs(n, random, RECONNECT_BASE_MS, RECONNECT_CAP_MS) })
    this.redis.on('error', () => {})
    this.stopRestart = restartWhenEnded(this.redis, () => backoffDelayMs(RESTART_ATTEMPT, random, RECONNECT_BASE_MS, RECONNECT_CAP_MS))
    this.setKey = `${keyPrefix(key)}:instances`
  }

  private instanceKey (id: string): string {
    return `${keyPrefix(this.key)}:instance:${id}`
  }

  async report (now = Date.now()): Promise<void> {
    const { current, peak, accepted, rejected, bus } = this.read()
    const mine: InstanceStats = { id: this.id, host: hostname(), pid: process.pid, current, peak, accepted, rejected, bus: bus.state, seenAt: now }
    await this.redis.multi().set(this.instanceKey(this.id), JSON.stringify(mine), 'PX', TTL_MS).sadd(this.setKey, this.id).exec()
  }

  /** Every live instance, this one first; only this one when Redis cannot be read. */
  async list (): Promise<InstanceStats[]> {
    const { current, peak, accepted, rejected, bus } = this.read()
    const mine: InstanceStats = { id: this.id, host: hostname(), pid: process.pid, current, peak, accepted, rejected, bus: bus.state, seenAt: Date.now() }
    let ids: string[]
    let values: Array<string | null>
    try {
      ids = (await this.redis.smembers(this.setKey)).filter((id) => id !== this.id).sort()
      values = ids.length === 0 ? [] : await this.redis.mget(...ids.map((id) => this.instanceKey(id)))
    } catch {
      return [mine]
    }
    const gone = ids.filter((_, i) => values[i] === null)
    if (gone.length > 0) await this.redis.srem(this.setKey, ...gone).catch(() => 0)
    return [mine, ...values.map((v) => (v === null ? null : parseInstance(v))).filter((v): v is InstanceStats => v !== null)]
  }

  async close (): Promise<void> {
    // Bounded: a stalled Redis must not hold the shutdown (the key expires by itself anyway).
    await withTimeout(this.redis.multi().del(this.instanceKey(this.id)).srem(this.setKey, this.id).exec().catch(() => undefined), CLOSE_TIMEOUT_MS)
    this.stopRestart()
    disconnectQuietly(this.redis)
  }
}
