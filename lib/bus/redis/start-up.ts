import type { Redis } from 'ioredis'
import { disconnectQuietly, isCluster, type RedisConnection } from './connection'

/**
 * The first connect of a bus connection, failing at the first error with what happened in words:
 * a retry will not fix a wrong password, an empty port or a server that is not Redis, and a
 * stalled server is reported before the plugin's start-up timeout rather than after it.
 */
export function firstReady (connection: RedisConnection, withinMs: number): Promise<void> {
  if (connection.status === 'ready') return Promise.resolve()
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`not ready within ${withinMs} ms (${connection.status})`)), withinMs)
    let settled = false
    const done = (error?: Error, cause?: Error): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      connection.off('ready', onReady)
      connection.off('error', onError)
      if (error === undefined) resolve()
      else reject(new Error(explainStartFailure(error, cause)))
    }
    const onReady = (): void => done()
    const onError = (error: Error): void => {
      // ioredis hides why a Cluster's nodes failed (its slot refresher ignores their error
      // events; "Failed to refresh slots cache."): one plain connect to a node, while the Cluster
      // still lists them, says why.
      const [node] = isCluster(connection) && 'lastNodeError' in error ? connection.nodes() : []
      if (node === undefined) done(error)
      else void connectError(node, withinMs).then((cause) => done(error, cause))
    }
    connection.once('ready', onReady)
    connection.on('error', onError)
    // Its own rejection ("Connection is closed.") says less than the error event before it.
    if (connection.status === 'wait') connection.connect().catch(() => undefined)
  })
}

/** The first error a fresh connection to `node`'s server meets (undefined: it connects), within `withinMs`. */
function connectError (node: Redis, withinMs: number): Promise<Error | undefined> {
  const probe = node.duplicate({ lazyConnect: true, retryStrategy: () => null, enableOfflineQueue: false, maxRetriesPerRequest: 0 })
  return new Promise<Error | undefined>((resolve) => {
    let first: Error | undefined
    probe.on('error', (error: Error) => { first ??= error })
    const timer = setTimeout(() => resolve(first), withinMs)
    probe.connect().then(() => resolve(undefined), () => resolve(first)).finally(() => clearTimeout(timer))
  }).finally(() => disconnectQuietly(probe))
}

/** Node's codes for a server certificate that does not check out (OpenSSL's verify errors, the host name check). */
const UNTRUSTED_CERTIFICATE = new Set(['SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'UNABLE_TO_GET_ISSUER_CERT', 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID', 'CERT_REVOKED', 'ERR_TLS_CERT_ALTNAME_INVALID'])

/** What a start-up error means, in one clause naming the cause and keeping Redis's own words. */
export function explainStartFailure (error: Error, nodeError?: Error): string {
  const { message } = error
  const code = (error as NodeJS.ErrnoException).code
  // A Cluster that reached no node says "Failed to refresh slots cache."; a node's error says why.
  const lastNodeError = (error as { lastNodeError?: unknown }).lastNodeError
  if (lastNodeError instanceof Error) return `no node of the cluster answered: ${explainStartFailure(nodeError ?? lastNodeError)}`
  if (code !== undefined && UNTRUSTED_CERTIFICATE.has(code)) {
    return `the server's TLS certificate is not trusted here (${code}: ${message}); give Node its CA (NODE_EXTRA_CA_CERTS) or pass an ioredis client with tls options`
  }
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER') return `what answers there does not speak TLS (${message}); use redis:// for a server without TLS`
  if (message.startsWith('WRONGPASS')) return `Redis refused the user name or password (${message})`
  if (message.startsWith('NOAUTH')) return `Redis wants a password and the URL gives none (${message.split(' ', 1)[0]})`
  if (message.startsWith('NOPERM')) return `the Redis user may not run what the bus needs (${message})`
  if (code === 'ECONNREFUSED') return `nothing is listening there (${message})`
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `cannot resolve the host (${message})`
  if (code === 'ETIMEDOUT') return `no answer to the TCP connect (${message})`
  if (/^Unknown RESP type|^Protocol error/.test(message)) return `what answers there is not Redis (${message})`
  if (message.startsWith('Socket timeout')) return `Redis accepted the connection but answered nothing: a stalled server (SIGSTOP, a long fork, a hung host)? (${message})`
  return message
}

/**
 * The dry run's refusals as one clause, or null when the user may run everything: the script asks
 * Redis's ACL (redis.acl_check_cmd, Redis 7) about each command the bus runs on its own keys.
 */
export function describeRefusals (refused: string[]): string | null {
  if (refused.length === 0) return null
  return `the Redis user may not run ${refused.join(', ')} (checked with ACL before the first publish): ` +
    'the bus needs to read and write its stream, meta hash, idempotency and probe keys'
}
