import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { STREAM_HEADERS } from '../streams/subscriber'
import { defaultKeyFn } from './request-key'
import { withReplyHeaders } from '../shared/reply-headers'
import { endAndClose, openUntilClose } from '../platform/server-closes-first'
import { encodeEvent, encodeRetry } from '../events/encoder'
import { jitter, jittered, JITTER_RATIO } from '../shared/jitter'
import { isPipelinedBehind } from '../platform/internals'
import type { Clocks } from '../shared/clocks'
import type { AdmissionSettings } from './admission-options'
import { REFUSALS, type AdmissionGauges, type RefusalReason } from '../observe/vocabulary'
import type { StreamStats } from '../observe/stats'
import { StormMeter } from './storm-meter'
import { Tarpit } from './tarpit'
import { TokenBucket } from './token-bucket'

/** Requests a connection may pipeline behind its stream (each costs ~1.6 KiB) before it is closed. */
export const MAX_PIPELINED_BEHIND_STREAM = 32

/** At most this many refusals are held in the tarpit at once (each holds a socket); beyond, they are answered at once. */
export const MAX_HELD_REFUSALS = 1000

/** What admission needs to know of the open streams: whether there is room, how many streams a key holds. */
export interface OpenStreams {
  readonly capacity: number
  readonly hasRoom: boolean
  countForKey: (key: string) => number
}

/** Whether a new stream here could be fed: the bus proves this instance receives. */
export interface Feed {
  receiving: () => boolean
}

/**
 * Admission's one answer when a stream opens: a ticket, carrying the stream's `retry:` frame drawn
 * now (its connection is marked as holding a stream), or null: the refusal is answered or held
 * in the tarpit.
 */
export interface Ticket {
  readonly retryFrame: Buffer
}

/**
 * Who may open a stream now, asked twice: `onRequest` (first among the stream route's own
 * onRequest hooks, before body and auth work) answers what is cheap and needs no identity —
 * shutting down, a deaf bus, capacity, pressure, the connect rate; `admit` (when the handler
 * subscribes, after the route's own hooks) answers once more, with the request's key, so the
 * per-key limit can count `request.user`, and capacity is rechecked because the hooks between may
 * have yielded. A refusal is 503 (429 for the per-key limit) with a Retry-After drawn from a
 * window that widens while refusals keep coming, answered at once or — during a storm — after a
 * hold, and the server closes the connection first so the TIME_WAIT stays off the client's
 * ephemeral ports.
 */
export class Admission {
  private closing = false
  private readonly storm: StormMeter
  private readonly tarpit: Tarpit
  private readonly bucket: TokenBucket | null
  private readonly messages: Record<RefusalReason, string>
  /** Connections holding a stream → requests pipelined behind it so far; weak, like the sockets. */
  private readonly pipelinedBehindStream = new WeakMap<Socket, number>()

  /** The widest delay handed out, in seconds (no bound without storm handling: nothing widens). */
  private readonly maxDelaySeconds: number

  constructor (
    private readonly fastify: FastifyInstance,
    private readonly streams: OpenStreams,
    private readonly feed: Feed,
    private readonly stats: StreamStats,
    private readonly options: AdmissionSettings,
    private readonly clocks: Clocks
  ) {
    const { storm } = options
    this.maxDelaySeconds = storm === false ? Infinity : storm.maxRetryAfterSeconds
    const maxLevel = storm === false ? 0 : Math.ceil(Math.log2(storm.maxRetryAfterSeconds / options.retryAfterSeconds))
    // Without storm handling no second is stormy: the level stays 0 and nothing widens.
    this.storm = new StormMeter(storm === false ? Infinity : storm.refusalsPerSecond, Math.max(maxLevel, 0))
    this.tarpit = new Tarpit(MAX_HELD_REFUSALS)
    const rate = options.connectRate
    this.bucket = rate === false ? null : new TokenBucket(rate.perSecond, rate.burst, clocks.monotonicNow())
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

  /**
   * The last check, with the request's key, in the turn the stream opens: a ticket, or null when
   * the refusal is answered (or held). A ticket marks the connection as holding a stream: nothing
   * pipelined behind it can be answered any more.
   */
  admit (request: FastifyRequest, reply: FastifyReply, key: string): Ticket | null {
    const reason = this.refusalReason(key, false)
    if (reason !== null) {
      this.refuse(reply, reason)
      return null
    }
    this.pipelinedBehindStream.set(request.raw.socket, 0)
    return { retryFrame: this.retryFrame() }
  }

  /** Refuses a stream nothing could feed now (its resumable log unreachable): told when to come back, as any refusal. */
  refuseLogUnavailable (reply: FastifyReply): void {
    this.refuse(reply, 'logUnavailable')
  }

  /** The `retry:` frame for a stream opened (or ended) now: retryMs ± 20%, widened during a storm. */
  readonly retryFrame = (): Buffer => {
    const scale = this.storm.scale(this.clocks.monotonicNow())
    const cap = this.maxDelaySeconds * 1000
    // The spread fits under the cap: center + spread never passes it (a storm's retry: stayed under 2 × cap).
    const spread = Math.min(this.options.retryMs * JITTER_RATIO * scale, cap / 2)
    const center = Math.min(this.options.retryMs * scale, cap - spread)
    return encodeRetry(jitter(center, Math.min(spread, center), this.clocks.random))
  }

  gauges (): AdmissionGauges {
    return { refusalsHeld: this.tarpit.size, stormLevel: this.storm.levelAt(this.clocks.monotonicNow()) }
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
    this.storm.recordRefusal(this.clocks.monotonicNow())
    this.stats.refused('closing')
    this.send(res, 'closing')
  }

  /** key null: before the route's hooks, when the request's key is not known yet. */
  private refusalReason (key: string | null, consumeToken: boolean): RefusalReason | null {
    if (this.closing) return 'closing'
    // Before any limit: a stream admitted now would be silent, then closed at the deaf spell's end.
    if (!this.feed.receiving()) return 'busDeaf'
    if (key !== null && this.options.maxClientsPerKey > 0 && this.streams.countForKey(key) >= this.options.maxClientsPerKey) return 'perKey'
    if (!this.streams.hasRoom) return 'capacity'
    if (this.isUnderPressure()) return 'pressure'
    if (consumeToken && this.bucket !== null && !this.bucket.take(this.clocks.monotonicNow())) return 'rate'
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
    const now = this.clocks.monotonicNow()
    this.storm.recordRefusal(now)
    this.stats.refused(reason)
    const answer = (): void => this.answer(reply, reason)
    const { storm } = this.options
    if (reason !== 'closing' && storm !== false && storm.tarpitMs > 0 && this.storm.isStorm(now)) {
      const holdMs = jittered(storm.tarpitMs, this.clocks.random, 1)
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
    const max = this.maxDelaySeconds
    const scale = reason === 'busDeaf' || this.options.storm === false ? 1 : this.storm.scale(now)
    const window = Math.min(this.options.retryAfterSeconds * scale, max)
    const drawn = Math.min(window + Math.floor(this.clocks.random() * (window + 1)), max)
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
    const seconds = this.drawRetryAfterSeconds(reason, this.clocks.monotonicNow())
    if (this.options.rejectWith === 'retry') {
      // For native EventSource pages: a 200 stream that only says when to come back, then ends;
      // a 503 would make the browser give up for good. The `refused` event lets a client that
      // knows it (tower-sse/client) tell this from an expiry.
      // Jittered below the cap: `seconds` may be the cap itself.
      const retryMs = jitter(Math.min(seconds * 1000, this.maxDelaySeconds * 1000 - 500), 500, this.clocks.random, 1000)
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
