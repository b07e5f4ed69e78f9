import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { STREAM_HEADERS } from '../streams/subscriber'
import { defaultKeyFn } from './request-key'
import { withReplyHeaders } from '../shared/reply-headers'
import { endAndClose, openUntilClose } from '../platform/server-closes-first'
import { encodeEvent, encodeRetry } from '../events/encoder'
import { jitter } from '../shared/jitter'
import { isPipelinedBehind } from '../platform/internals'
import type { NormalizedOptions } from '../options'
import { REFUSALS, type AdmissionGauges, type RefusalReason } from '../observe/vocabulary'
import type { StreamStats } from '../observe/stats'
import { StormMeter } from './storm-meter'
import { Tarpit } from './tarpit'
import { TokenBucket } from './token-bucket'

/** Requests a connection may pipeline behind its stream (each costs ~1.6 KiB) before it is closed. */
export const MAX_PIPELINED_BEHIND_STREAM = 32

/**
 * What admission needs of the registry: whether there is room, how many streams a key holds, and
 * whether a new stream could be fed (the bus proves this instance receives).
 */
export interface Occupancy {
  readonly capacity: number
  readonly hasRoom: boolean
  countForKey: (key: string) => number
  readonly receiving: boolean
}

/**
 * Admission's one answer when a stream opens: a ticket (the stream's `retry:` frame, drawn now, and
 * `opened()`, which marks its connection as holding a stream) or the refusal, already answered or
 * held in the tarpit.
 */
export type AdmissionAnswer =
  | { readonly kind: 'ticket', readonly retryFrame: Buffer, readonly opened: () => void }
  | { readonly kind: 'refused', readonly reason: RefusalReason }

/**
 * Who may open a stream now, asked twice: `onRequest` (first among the stream route's own
 * onRequest hooks, before body and auth work) answers what is cheap and needs no identity —
 * shutting down, a deaf bus, capacity, pressure, the connect rate; `admit` (when the handler subscribes, after
 * the route's own hooks) answers once more, with the request's key, so the per-key limit can count
 * `request.user`, and capacity is rechecked because the hooks between may have yielded. A refusal is 503 (429 for the per-key limit) with a Retry-After drawn from a window that
 * widens while refusals keep coming, answered at once or — during a storm — after a hold, and the
 * server closes the connection first so the TIME_WAIT stays off the client's ephemeral ports.
 */
export class Admission {
  private closing = false
  private readonly storm: StormMeter
  private readonly tarpit: Tarpit
  private readonly bucket: TokenBucket | null
  private readonly messages: Record<RefusalReason, string>
  /** Connections holding a stream → requests pipelined behind it so far; weak, like the sockets. */
  private readonly pipelinedBehindStream = new WeakMap<Socket, number>()

  constructor (
    private readonly fastify: FastifyInstance,
    private readonly streams: Occupancy,
    private readonly stats: StreamStats,
    private readonly options: NormalizedOptions
  ) {
    const maxLevel = Math.ceil(Math.log2(options.maxRetryAfterSeconds / options.retryAfterSeconds))
    this.storm = new StormMeter(options.stormRefusalsPerSecond, Math.max(maxLevel, 0))
    this.tarpit = new Tarpit(options.maxHeldRefusals)
    this.bucket = options.maxConnectsPerSecond > 0
      ? new TokenBucket(options.maxConnectsPerSecond, options.connectBurst || options.maxConnectsPerSecond, options.monotonicNow())
      : null
    const limits = { capacity: streams.capacity, perKey: options.maxClientsPerKey }
    const entries = Object.entries(REFUSALS).map(([reason, { message }]) =>
      [reason, JSON.stringify(`tower-sse: ${message(limits)}`)])
    this.messages = Object.fromEntries(entries) as Record<RefusalReason, string>
  }

  readonly onRequest: onRequestHookHandler = (request: FastifyRequest, reply: FastifyReply, done) => {
    // HEAD takes no slot (the stream's headers, then the close): nothing to admit.
    if (request.method === 'HEAD') {
      done()
      return
    }
    // By address: the storm report names who connects, before any app hook has said who they are.
    this.stats.attempt(defaultKeyFn(request))
    // A request waiting behind another response never sees its socket close: a stream no client
    // can read must not take a slot.
    if (isPipelinedBehind(reply.raw)) {
      this.refusePipelined(request, reply)
      return
    }
    const reason = this.refusalReason(null, true)
    if (reason === null) {
      done()
      return
    }
    this.refuse(reply, reason)
  }

  /** The last check, with the request's key, right before the stream opens: a ticket, or a refusal answered. */
  admit (request: FastifyRequest, reply: FastifyReply, key: string): AdmissionAnswer {
    const reason = this.refusalReason(key, false)
    if (reason !== null) {
      this.refuse(reply, reason)
      return { kind: 'refused', reason }
    }
    const socket = request.raw.socket
    // Once the stream is open nothing pipelined behind it on its connection can be answered.
    return { kind: 'ticket', retryFrame: this.retryFrame(), opened: () => this.pipelinedBehindStream.set(socket, 0) }
  }

  /** The `retry:` frame for a stream opened (or drained) now: retryMs ± jitter, widened during a storm. */
  retryFrame (): Buffer {
    const scale = this.storm.scale(this.options.monotonicNow())
    const cap = this.options.maxRetryAfterSeconds * 1000
    // The spread fits under the cap: center + spread never passes it (a storm's retry: stayed under 2 × cap).
    const spread = Math.min(this.options.retryJitterMs * scale, cap / 2)
    const center = Math.min(this.options.retryMs * scale, cap - spread)
    return encodeRetry(jitter(center, Math.min(spread, center), this.options.random))
  }

  gauges (): AdmissionGauges {
    return { refusalsHeld: this.tarpit.size, stormLevel: this.storm.levelAt(this.options.monotonicNow()) }
  }

  /** From now on every new stream is refused, and held refusals are answered at once (shutdown). */
  close (): void {
    this.closing = true
    this.tarpit.releaseAll()
  }

  /**
   * Refuses a request Fastify's router would otherwise answer itself while closing (see
   * platform/request-takeover.ts): counted and answered like any other "shutting down" refusal.
   */
  readonly refuseClosing = (res: ServerResponse): void => {
    this.storm.recordRefusal(this.options.monotonicNow())
    this.stats.refused('closing')
    this.send(res, 'closing')
  }

  /** key null: before the route's hooks, when the request's key is not known yet. */
  private refusalReason (key: string | null, consumeToken: boolean): RefusalReason | null {
    if (this.closing) return 'closing'
    // Before any limit: a stream admitted now would be silent, then closed at the deaf spell's end.
    if (!this.streams.receiving) return 'busDeaf'
    if (key !== null && this.options.maxClientsPerKey > 0 && this.streams.countForKey(key) >= this.options.maxClientsPerKey) return 'perKey'
    if (!this.streams.hasRoom) return 'capacity'
    if (this.isUnderPressure()) return 'pressure'
    if (consumeToken && this.bucket !== null && !this.bucket.take(this.options.monotonicNow())) return 'rate'
    return null
  }

  /**
   * A request pipelined behind another never takes a slot, and one connection's burst is no
   * storm: no widening for everyone, no hold. Behind a finite answer it is refused (delivered once
   * the answers ahead are). Behind a stream no answer can ever be delivered: it stays unanswered,
   * since a written one would queue, and Node stops reading a socket with a queue — the client's
   * close would go unseen and its slot stay taken. A connection that keeps piling them up costs
   * memory per request, so the MAX_PIPELINED_BEHIND_STREAM-th closes it, stream included.
   */
  private refusePipelined (request: FastifyRequest, reply: FastifyReply): void {
    this.stats.refused('pipelined')
    const socket = request.raw.socket
    const behind = this.pipelinedBehindStream.get(socket)
    if (behind === undefined) {
      this.answer(reply, 'pipelined')
      return
    }
    reply.hijack()
    if (behind + 1 >= MAX_PIPELINED_BEHIND_STREAM) socket.destroy()
    else this.pipelinedBehindStream.set(socket, behind + 1)
  }

  private refuse (reply: FastifyReply, reason: RefusalReason): void {
    // Taken over now, even when held: Fastify must not answer it meanwhile.
    reply.hijack()
    const now = this.options.monotonicNow()
    this.storm.recordRefusal(now)
    this.stats.refused(reason)
    const answer = (): void => this.answer(reply, reason)
    if (reason !== 'closing' && this.options.tarpitMs > 0 && this.storm.isStorm(now)) {
      const holdMs = jitter(this.options.tarpitMs, this.options.tarpitJitterMs, this.options.random, 1)
      if (this.tarpit.hold(reply, holdMs, answer)) {
        this.stats.tarpitted()
        return
      }
    }
    answer()
  }

  /**
   * Seconds drawn from [w, 2w] (bounded), where w is retryAfterSeconds widened by the storm level —
   * but for a deaf bus: its clients are not too many, the instance is cut off, and they should be
   * back soon after the heal (the storm still holds the refusal in the tarpit first).
   */
  private drawRetryAfterSeconds (reason: RefusalReason, now: number): number {
    const max = this.options.maxRetryAfterSeconds
    const scale = reason === 'busDeaf' ? 1 : this.storm.scale(now)
    const window = Math.min(this.options.retryAfterSeconds * scale, max)
    const drawn = Math.min(window + Math.floor(this.options.random() * (window + 1)), max)
    // The wait for the next token is capped like every other delay handed out.
    return reason === 'rate' && this.bucket !== null ? Math.min(Math.max(drawn, this.bucket.secondsUntilToken()), max) : drawn
  }

  private answer (reply: FastifyReply, reason: RefusalReason): void {
    // Answered on the raw response so that nothing (length, hooks) comes between the last byte
    // and the server's close.
    reply.hijack()
    this.send(reply.raw, reason, reply)
  }

  /** `reply`: the app's headers to carry (none for a request Fastify's router never routed). */
  private send (res: ServerResponse, reason: RefusalReason, reply?: FastifyReply): void {
    const headers = (own: OutgoingHttpHeaders): OutgoingHttpHeaders => reply === undefined ? own : withReplyHeaders(reply, own)
    const seconds = this.drawRetryAfterSeconds(reason, this.options.monotonicNow())
    if (this.options.rejectWith === 'retry') {
      // For native EventSource pages: a 200 stream that only says when to come back, then ends;
      // a 503 would make the browser give up for good. The `refused` event lets a client that
      // knows it (tower-sse/client) tell this from an expiry.
      // Jittered below the cap: `seconds` may be the cap itself.
      const retryMs = jitter(Math.min(seconds * 1000, this.options.maxRetryAfterSeconds * 1000 - 500), 500, this.options.random, 1000)
      const refused = encodeEvent({ event: 'refused', data: { code: REFUSALS[reason].code, reason, retryAfterSeconds: seconds } })
      openUntilClose(res, 200, headers(STREAM_HEADERS))
      endAndClose(res, Buffer.concat([encodeRetry(retryMs), refused]))
      return
    }
    const { status, code } = REFUSALS[reason]
    openUntilClose(res, status, headers({
      'retry-after': String(seconds),
      'cache-control': 'no-store',
      'content-type': 'application/json; charset=utf-8'
    }))
    endAndClose(res, `{"statusCode":${status},"code":"${code}","error":"${status === 429 ? 'Too Many Requests' : 'Service Unavailable'}",` +
      `"reason":"${reason}","message":${this.messages[reason]},"retryAfterSeconds":${seconds}}`)
  }

  private isUnderPressure (): boolean {
    // Present when @fastify/under-pressure is registered on this instance or an ancestor.
    const probe = (this.fastify as { isUnderPressure?: () => boolean }).isUnderPressure
    return typeof probe === 'function' && probe.call(this.fastify)
  }
}
