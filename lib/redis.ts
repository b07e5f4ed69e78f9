// `tower-sse/redis`: the connection the Redis bus makes from a URL (redis://, rediss://,
// redis+sentinel://; redis+cluster:// makes an ioredis Cluster), for an app's own Redis needs. An
// entry of its own because its types are ioredis's: the main entry's types compile without
// ioredis (an optional peer) installed.
export { createRedisConnection } from './bus/redis/connection'
