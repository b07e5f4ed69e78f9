import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import type { ActivityLog } from './activity-log'
import type { NormalizedOptions } from './options'
import type { SseRegistry } from './registry'

export type RefusalReason = 'capacity' | 'pressure' | 'closing'

interface Refusal {
  status: number
  retryAfter: string
  body: string
}

/**
 * Who may open a stream now. Runs as the SSE route's own onRequest hook, before any stream
 * header: a refusal is a small finished response, with no listener or timer left behind.
 */
export class Admission {
  private closing = false
  private readonly refusals: Record<RefusalReason, Refusal>

  constructor (
    private readonly fastify: FastifyInstance,
    private readonly registry: SseRegistry,
    private readonly activity: ActivityLog,
    options: NormalizedOptions
  ) {
    const refusal = (message: string): Refusal => ({
      status: 503,
      retryAfter: String(options.retryAfterSeconds),
      body: JSON.stringify({
        statusCode: 503,
        error: 'Service Unavailable',
        message: `tower-sse: ${message}; retry after ${options.retryAfterSeconds} s`,
        retryAfterSeconds: options.retryAfterSeconds
      })
    })
    // Built once: the refusal path is the hot path during a storm.
    this.refusals = {
      capacity: refusal(`all ${registry.capacity} event streams are in use`),
      pressure: refusal('the server is under pressure'),
      closing: refusal('the server is shutting down')
    }
  }

  /** Why a stream cannot be opened right now, or null if it can. */
  refusalReason (): RefusalReason | null {
    if (this.closing) return 'closing'
    if (!this.registry.hasRoom) return 'capacity'
    if (this.isUnderPressure()) return 'pressure'
    return null
  }

  readonly onRequest: onRequestHookHandler = (_request: FastifyRequest, reply: FastifyReply, done) => {
    const reason = this.refusalReason()
    if (reason === null) {
      done()
      return
    }
    this.refuse(reply, reason)
  }

  /** Answers the refusal; `Connection: close` puts the TIME_WAIT on the server, not the client. */
  refuse (reply: FastifyReply, reason: RefusalReason): void {
    const refusal = this.refusals[reason]
    this.activity.count('rejected')
    void reply
      .code(refusal.status)
      .header('retry-after', refusal.retryAfter)
      .header('cache-control', 'no-store')
      .header('connection', 'close')
      .type('application/json; charset=utf-8')
      .send(refusal.body)
  }

  /** From now on every new stream is refused (shutdown has begun). */
  close (): void {
    this.closing = true
  }

  private isUnderPressure (): boolean {
    // Present when @fastify/under-pressure is registered on this instance or an ancestor.
    const probe = (this.fastify as { isUnderPressure?: () => boolean }).isUnderPressure
    return typeof probe === 'function' && probe.call(this.fastify)
  }
}
