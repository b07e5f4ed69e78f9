import type { Redis, RedisOptions } from 'ioredis'
import { parseRedisUrl } from './url'

/**
 * How long disconnect() waits for the server's side of the close before destroying the socket:
 * ioredis waits 2 s by default, and a stalled server never answers, which held a shutdown
 * (SIGTERM) past drainMs + 2 s. A server that is fine closes within a millisecond on loopback.
 */
export const DISCONNECT_TIMEOUT_MS = 200

/**
 * A new ioredis client for the URL with `options` on top (the caller's reconnect policy, offline
 * queue…): the one place that turns the `redis` option into a connection, for the bus and for
 * Tower's instance board alike. The client is created, not connected (unless options say so).
 */
export function createRedisConnection (url: string, rest: RedisOptions): Redis {
  const options: RedisOptions = { disconnectTimeout: DISCONNECT_TIMEOUT_MS, ...rest }
  // ioredis is an optional peer dependency: loaded only when a URL is given.
  const RedisClient = (require('ioredis') as typeof import('ioredis')).Redis
  const target = parseRedisUrl(url)
  if (target.kind === 'server') return new RedisClient(url, options)
  const { sentinels, name, tls, db, username, password, sentinelUsername, sentinelPassword } = target
  return new RedisClient({
    ...options,
    sentinels,
    name,
    db,
    username,
    password,
    sentinelUsername,
    sentinelPassword,
    ...(tls ? { tls: {}, sentinelTLS: {}, enableTLSForSentinelMode: true } : {}),
    // A primary that hangs rather than dies is noticed by the sentinels' +switch-master message.
    failoverDetector: true
  })
}

/** The backoff attempt a restart draws its delay at: the whole window, up to the backoff's cap. */
export const RESTART_ATTEMPT = 10

/**
 * ioredis gives a connection up for good (status 'end') when a reconnect's connector fails instead
 * of retrying. Seen after a Sentinel failover on a loaded machine: every command refused with
 * "Connection is end" until the process restarted. (ioredis 6's source has the path: a
 * +switch-master that disconnects while a reconnect still asks the sentinels for the primary makes
 * the connector throw "Connection is closed.".) This starts an ended connection again after
 * `delayMs()`, each time it ends, until the returned stop() is called — before the owner closes it
 * on purpose.
 */
export function restartWhenEnded (connection: Redis, delayMs: () => number): () => void {
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  const onEnd = (): void => {
    if (stopped) return
    clearTimeout(timer)
    timer = setTimeout(() => {
      // A failed start ends it again, which schedules the next try.
      if (!stopped && connection.status === 'end') connection.connect().catch(() => {})
    }, delayMs()).unref()
  }
  connection.on('end', onEnd)
  return () => {
    stopped = true
    clearTimeout(timer)
    connection.off('end', onEnd)
  }
}
