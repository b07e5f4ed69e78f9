import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import type { NormalizedOptions } from '../options'
import type { Bus } from './bus'
import { MemoryBus } from './memory'
import { RedisBus } from './redis/redis-bus'

/** The one place that picks the bus: Redis when the `redis` option is set, else memory. */
export function createBus (options: NormalizedOptions, log: FastifyBaseLogger): Bus {
  if (options.redis === undefined) return new MemoryBus(options.idempotencyWindowMs, options.monotonicNow)
  return new RedisBus({
    redis: options.redis as string | Redis,
    key: options.redisKey,
    historyMaxEvents: options.historyMaxEvents,
    publishTimeoutMs: options.publishTimeoutMs,
    maxPendingPublishes: options.maxPendingPublishes,
    maxPublishBatch: options.maxPublishBatch,
    idempotencyWindowMs: options.idempotencyWindowMs,
    deafCloseMs: options.busDeafCloseMs,
    random: options.random,
    log: { warn: (msg) => log.warn(msg), info: (msg) => log.info(msg) }
  })
}
