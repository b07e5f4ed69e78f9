import type { RedisConnection } from './connection'

/**
 * The first connect of a bus connection, failing at the first error with what happened in words:
 * a retry will not fix a wrong password, an empty port or a server that is not Redis, and a
 * stalled server is reported before the plugin's start-up timeout rather than after it.
 */
export function firstReady (connection: RedisConnection, withinMs: number): Promise<void> {
  if (connection.status === 'ready') return Promise.resolve()
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`not ready within ${withinMs} ms (${connection.status})`)), withinMs)
    const done = (error?: Error): void => {
      clearTimeout(timer)
      connection.off('ready', onReady)
      connection.off('error', onError)
      if (error === undefined) resolve()
      else reject(new Error(explainStartFailure(error)))
    }
    const onReady = (): void => done()
    const onError = (error: Error): void => done(error)
    connection.once('ready', onReady)
    connection.once('error', onError)
    // Its own rejection ("Connection is closed.") says less than the error event before it.
    if (connection.status === 'wait') connection.connect().catch(() => undefined)
  })
}

/** What a start-up error means, in one clause naming the cause and keeping Redis's own words. */
export function explainStartFailure (error: Error): string {
  const { message } = error
  const code = (error as NodeJS.ErrnoException).code
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
