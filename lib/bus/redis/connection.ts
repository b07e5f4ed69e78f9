import type { Socket } from 'node:net'
import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis'
import { backoffDelayMs } from '../../shared/backoff'
import { parseRedisUrl } from './url'

/**
 * How long disconnect() waits for the server's side of the close before destroying the socket:
 * ioredis waits 2 s by default, and a stalled server never answers, so a shutdown (SIGTERM) would
 * last drainMs + 2 s. A server that is fine closes within a millisecond on loopback.
 */
export const DISCONNECT_TIMEOUT_MS = 200

/** A connection to one server (through Sentinel or not) or to a Redis Cluster: both answer the same commands. */
export type RedisConnection = Redis | Cluster

export function isCluster (connection: RedisConnection): connection is Cluster {
  return (connection as Cluster).isCluster === true
}

/**
 * The options of a Cluster client whose node connections get `node`: the offline queue and the
 * lazy connect are the Cluster's own (its connections to the nodes queue nothing either), the
 * reconnect policy is the Cluster's too when every node is gone.
 */
function clusterOptions (node: RedisOptions): ClusterOptions {
  return {
    lazyConnect: node.lazyConnect ?? false,
    enableOfflineQueue: node.enableOfflineQueue ?? true,
    ...(node.retryStrategy === undefined ? {} : { clusterRetryStrategy: node.retryStrategy }),
    redisOptions: node
  }
}

/**
 * A new ioredis client for the URL with `options` on top (the caller's reconnect policy, offline
 * queue…): the one place that turns the `redis` option into a connection, for the bus and for
 * Tower's instance board alike. The client is created, not connected (unless options say so).
 */
export function createRedisConnection (url: string, rest: RedisOptions): RedisConnection {
  const options: RedisOptions = { disconnectTimeout: DISCONNECT_TIMEOUT_MS, ...rest }
  // ioredis is an optional peer dependency: loaded only when a URL is given.
  const ioredis = require('ioredis') as typeof import('ioredis')
  const RedisClient = ioredis.Redis
  const target = parseRedisUrl(url)
  if (target.kind === 'server') return new RedisClient(url, options)
  if (target.kind === 'cluster') {
    const { nodes, tls, username, password } = target
    return new ioredis.Cluster(nodes, clusterOptions({ ...options, username, password, ...(tls ? { tls: {} } : {}) }))
  }
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

/**
 * Disconnects (`reconnect`: then connects again), with a listener for an error the socket may
 * still emit: ioredis ends the socket of a connection whose error it has handled already (a TLS
 * handshake refused) with no listener left on it, and the server's answer to that end (a TLS
 * alert) would be an uncaught exception — the app's crash instead of the start-up error.
 */
export function disconnectQuietly (connection: RedisConnection, reconnect = false): void {
  for (const node of isCluster(connection) ? connection.nodes() : [connection]) {
    (node.stream as Socket | undefined)?.on('error', () => {})
  }
  connection.disconnect(reconnect)
}

/** The backoff attempt a restart draws its delay at: the whole window, up to the backoff's cap. */
export const RESTART_ATTEMPT = 10

/**
 * ioredis can give a connection up for good (status 'end': every command refused with "Connection
 * is end") when a reconnect's connector fails instead of retrying: in ioredis 6, a +switch-master
 * that disconnects while a reconnect still asks the sentinels for the primary makes the connector
 * throw "Connection is closed.", and nothing reconnects. This starts an ended connection again
 * after `delayMs()`, each time it ends, until the returned stop() is called — before the owner
 * closes it on purpose.
 */
export function restartWhenEnded (connection: RedisConnection, delayMs: () => number): () => void {
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

/** Reconnect delays: full jitter over an exponential window, capped (no herd on Redis either). */
const BACKOFF_BASE_MS = 100
const BACKOFF_CAP_MS = 2000
export const CONNECT_TIMEOUT_MS = 5000
const KEEPALIVE_MS = 1000

/** The bus's two connections: the publisher (the app's client when one is given) and the blocking reader, always its own. */
export interface BusConnections {
  publisher: RedisConnection
  reader: RedisConnection
  ownsPublisher: boolean
  /** Another connection of ours, as the reader is (resumable streams' logs): its traffic never queues ahead of the bus's. */
  open: () => OwnConnection
  /** Stops starting ended connections again (before they are closed on purpose). */
  stopRestarts: () => void
}

/** A connection of ours beside the bus's: started again when it ends, until close(). */
export interface OwnConnection {
  connection: RedisConnection
  close: () => void
}

/**
 * Opens (lazily) the bus's connections: no offline queue and no resent commands (a publish is
 * answered in time or refused, never sent late), a deadline on every command — one that has seen
 * no reply byte for `commandDeadlineMs` tears the socket down and ioredis reconnects, so a
 * half-open socket never holds a reader forever — TCP keepalive for the sockets idle in between,
 * and jittered reconnects. Ended connections of ours are started again; an app's connection that
 * ended is the app's to start again.
 */
export function openBusConnections (redis: string | RedisConnection, random: () => number, commandDeadlineMs: number): BusConnections {
  const own: RedisOptions = {
    lazyConnect: true,
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    connectTimeout: CONNECT_TIMEOUT_MS,
    socketTimeout: commandDeadlineMs,
    keepAlive: KEEPALIVE_MS,
    // The reader duplicates an app's client too: it must not hold a close on a stalled server either.
    disconnectTimeout: DISCONNECT_TIMEOUT_MS,
    // Full jitter over windows of 200 ms, 400 ms, … 2 s.
    retryStrategy: (attempt) => backoffDelayMs(attempt + 1, random, BACKOFF_BASE_MS, BACKOFF_CAP_MS)
  }
  const ownsPublisher = typeof redis === 'string'
  const publisher = typeof redis === 'string' ? createRedisConnection(redis, own) : redis
  // A Cluster's duplicate keeps the app's node options (its password, TLS) under ours.
  const ours = (): RedisConnection => isCluster(publisher)
    ? publisher.duplicate([], clusterOptions({ ...publisher.options.redisOptions, ...own }))
    : publisher.duplicate(own)
  // The blocking reader needs a connection of its own; it is always ours.
  const reader = ours()
  const restartDelay = (): number => backoffDelayMs(RESTART_ATTEMPT, random, BACKOFF_BASE_MS, BACKOFF_CAP_MS)
  const stops = (ownsPublisher ? [publisher, reader] : [reader]).map((connection) => restartWhenEnded(connection, restartDelay))
  const open = (): OwnConnection => {
    const connection = ours()
    const stop = restartWhenEnded(connection, restartDelay)
    return { connection, close: () => { stop(); disconnectQuietly(connection) } }
  }
  return { publisher, reader, ownsPublisher, open, stopRestarts: () => { for (const stop of stops) stop() } }
}

/** Resolves once `connection` is ready (connecting it if it waits), rejects if it ends or is not ready within CONNECT_TIMEOUT_MS. */
export function whenReady (connection: RedisConnection): Promise<void> {
  if (connection.status === 'ready') return Promise.resolve()
  if (connection.status === 'wait') return connection.connect()
  return new Promise((resolve, reject) => {
    // Unref'd: a wait that close() cut short must not hold the process either.
    const timer = setTimeout(() => done(new Error(`not ready after ${CONNECT_TIMEOUT_MS} ms (${connection.status})`)), CONNECT_TIMEOUT_MS).unref()
    const done = (error?: Error): void => {
      clearTimeout(timer)
      connection.off('ready', onReady)
      connection.off('end', onEnd)
      if (error === undefined) resolve()
      else reject(error)
    }
    const onReady = (): void => done()
    const onEnd = (): void => done(new Error('connection ended'))
    connection.once('ready', onReady)
    connection.once('end', onEnd)
  })
}
