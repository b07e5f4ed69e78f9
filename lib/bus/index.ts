import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import type { Bus } from './bus'
import { MemoryBus } from './memory'
import { RedisBus } from './redis/redis-bus'
import type { RedisSettings } from './redis/redis-options'
import type { Clocks } from '../shared/clocks'

/** The one place that picks the bus: Redis when the `redis` option is set, else memory. */
export function createBus (redis: RedisSettings | undefined, history: { events: number, idempotencyWindowMs: number }, clocks: Clocks, log: FastifyBaseLogger): Bus {
  if (redis === undefined) return new MemoryBus(history.idempotencyWindowMs, clocks.monotonicNow)
  return new RedisBus({
    ...redis,
    connection: redis.connection as string | Redis,
    historyEvents: history.events,
    idempotencyWindowMs: history.idempotencyWindowMs,
    random: clocks.random,
    log: { warn: (msg) => log.warn(msg), info: (msg) => log.info(msg) }
  })
}
