import type { Bus } from '../bus/bus'
import { RedisBus } from '../bus/redis/redis-bus'
import type { RedisSettings } from '../bus/redis/redis-options'
import type { ResumableLog } from './log'
import { MemoryLog } from './memory-log'
import { RedisLog } from './redis-log'

/** The log resumable streams keep their events in: in Redis when the bus is (on a connection of its own, under the bus's key), else in this process. */
export function createLog (bus: Bus, redis: RedisSettings | undefined): ResumableLog {
  if (redis === undefined || !(bus instanceof RedisBus)) return new MemoryLog()
  const own = bus.openConnection()
  return new RedisLog(own.connection, redis.key, own.close)
}
