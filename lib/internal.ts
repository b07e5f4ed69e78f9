// `tower-sse/internal`: what Tower (lib/tower/, which imports the plugin only through the package's
// entries) needs beyond the documented API. Undocumented on purpose and not covered by semver: an
// app imports `tower-sse`, `tower-sse/client`, `tower-sse/redis` and `tower-sse/testing`. Its
// types are ioredis's too, as `tower-sse/redis`'s are.
export { normalizeOptions, type NormalizedOptions } from './options'
export { isValidTopic } from './events/topic'
export { parseHost, parseAllowedHost, isAllowedHost } from './admission/request-guard'
export { IDEMPOTENCY_KEY } from './streams/registry'
export { createRedisConnection, disconnectQuietly, RESTART_ATTEMPT, restartWhenEnded, type RedisConnection } from './bus/redis/connection'
export { keyPrefix } from './bus/redis/keys'
export { parseRedisUrl, redactRedisUrl } from './bus/redis/url'
export { backoffDelayMs, type RandomSource } from './shared/backoff'
