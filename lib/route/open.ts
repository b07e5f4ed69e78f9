import { randomUUID } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Admission } from '../admission/admission'
import { endAndClose, openUntilClose } from '../platform/server-closes-first'
import { encodeEvent, type SseEventInit } from '../events/encoder'
import { parseEventId, type ParsedEventId } from '../bus/event-id'
import { jittered } from '../shared/jitter'
import type { Clocks } from '../shared/clocks'
import { MAX_TIMER_MS } from '../shared/option-rules'
import { hasLeft } from '../platform/internals'
import { runOnResponseHooks, runOnSendHooks } from '../platform/route-hooks'
import type { KeyFn } from '../admission/request-key'
import type { Registry } from '../streams/registry'
import type { FanOut } from '../streams/fan-out'
import type { StreamStats } from '../observe/stats'
import { expiresAt, Subscriber, STREAM_HEADERS, type Lifetime, type SseClientInfo, type StreamContext, type StreamPlan } from '../streams/subscriber'
import { lastEventIdOf, topicSet, type TopicsGranted } from './stream-request'
import { ALL_TOPICS } from '../events/topic'
import { withReplyHeaders } from '../shared/reply-headers'
import type { InitialEvent, RouteSettings, StreamRouteOptions } from './route-options'
import { pumpStream, type PerRequestStream } from './per-request'

const EMPTY = Buffer.alloc(0)

/** What a handler may decide for this one stream (`reply.eventStream.subscribe({ … })`); omitted: the route's and plugin's hooks decide. */
export interface SubscribeOptions {
  /**
   * The topics this stream is granted beyond the untopiced events (null: none; ALL_TOPICS: every
   * one); default: the route's topicsFromRequest, else the plugin's, else none.
   */
  topics?: TopicsGranted
  /** Whose stream this is, for maxClientsPerKey; default: the route's keyFn (e.g. `request.user.id`). */
  key?: string
  /** Where to resume (null: nowhere); default: the `Last-Event-ID` header or `?lastEventId=`. */
  lastEventId?: string | null
  /** The first event (or a hook that builds it from the stream's info); default: the route's initialEvent. */
  initialEvent?: SseEventInit | InitialEvent | null
  /**
   * Epoch ms after which the stream's credentials are no longer good (a token's `exp` × 1000):
   * the stream then ends with a jittered `retry:`, counted as `credentialsExpired`, if max age
   * has not ended it first. Its client reconnects and authenticates again.
   */
  expiresAt?: number
  /**
   * This connection's own events (an async generator, a Readable in object mode), each
   * `{ data, event?, id?, retry? }`, sent to it only, the next one pulled once the previous fits its
   * byte budget. The stream's end calls the iterator's return(); when the iterable ends, the stream
   * stays open for broadcasts; a throw is logged and ends the stream with a `retry:`, counted as
   * `streamFailed`. Not kept in history: a reconnect does not replay it (broadcast to a topic for that).
   */
  stream?: PerRequestStream
}

/** The plugin's settings the opener reads. */
export type OpenerSettings = Pick<RouteSettings, 'keyFn' | 'topicsFromRequest' | 'initialEvent'> & { maxAgeMs: number }

/** Everything a stream needs, resolved before admission decides and before any byte is written. */
interface Prepared {
  plan: StreamPlan
  lastEventId: ParsedEventId | null
  /** The initial event's frame, encoded (empty: none). */
  initialFrame: Buffer
}

/** Status codes a stream may open with: the app's own 2xx that has a body. An EventSource takes 200 only. */
const STREAM_STATUSES = new Set([200, 201, 202, 203])

/**
 * Opens event streams: the one place that does, in one pass. Every user callback runs, the route's
 * onSend hooks run (for the headers they set) and every first frame is encoded first; a throw or an
 * unencodable value rejects (the route answers 500 through the app's error handler), counted, with
 * nothing written. Then, in one turn with no await: a client that already left is let go without a
 * slot, admission answers once (a ticket with the stream's `retry:`, or a refusal it wrote), and
 * only then is the stream built, written and added to the registry.
 */
export class StreamOpener {
  /** Requests whose subscribe() has not settled: an answer Fastify sends meanwhile is a forgotten `return`. */
  private readonly pending = new WeakSet<FastifyRequest>()
  /** Requests whose onSend hooks the opener is running itself (the forgotten-return check stands aside). */
  private readonly runningHooks = new WeakSet<FastifyRequest>()

  constructor (
    private readonly registry: Registry,
    private readonly fanOut: FanOut,
    private readonly admission: Admission,
    private readonly stats: StreamStats,
    private readonly settings: OpenerSettings,
    private readonly context: StreamContext,
    private readonly clocks: Clocks
  ) {}

  /** Whether Fastify is answering `request` while its subscribe() is still under way (not returned from the handler). */
  answeredMidway (request: FastifyRequest): boolean {
    return this.pending.has(request) && !this.runningHooks.has(request)
  }

  /**
   * Synchronous while every callback and hook is: the stream then opens in the turn its request
   * arrived, as a connection's pipelined requests are parsed (and must already see it holding a stream).
   */
  open (request: FastifyRequest, reply: FastifyReply, route: StreamRouteOptions, asked: SubscribeOptions = {}): Promise<void> {
    if (request.method === 'HEAD') {
      // The stream's headers and the close at once: a stream answered without a body would hold
      // a slot and a `curl -I` until max age.
      reply.hijack()
      openUntilClose(reply.raw, 200, withReplyHeaders(reply, STREAM_HEADERS))
      endAndClose(reply.raw)
      return Promise.resolve()
    }
    const failed = (error: unknown): Promise<void> => {
      this.pending.delete(request)
      // A bad or forbidden subscription is the client's (400, 403); anything else is the app's, and counted.
      const status = (error as { statusCode?: number } | null)?.statusCode
      if (status !== 400 && status !== 403) this.stats.failedOpen()
      if (reply.sent) {
        // Fastify answered already (the handler did not return this promise): nobody is waiting on it.
        request.log.error({ err: error }, 'tower-sse: an event stream could not open')
        return Promise.resolve()
      }
      return Promise.reject(error)
    }
    let prepared: Prepared | PromiseLike<Prepared>
    try {
      prepared = this.prepare(request, reply, route, asked)
    } catch (error) {
      return failed(error)
    }
    // Settled with nothing (a reply is thenable: resolving with it would wait for the stream's end).
    if (!isThenable(prepared)) return Promise.resolve(this.start(request, reply, prepared, asked.stream))
    this.pending.add(request)
    return Promise.resolve(prepared).then((ready) => {
      this.pending.delete(request)
      this.start(request, reply, ready, asked.stream)
    }, failed)
  }

  /** In one turn, nothing awaited: the client is still there, admission admits, the stream opens. */
  private start (request: FastifyRequest, reply: FastifyReply, { plan, lastEventId, initialFrame }: Prepared, stream: PerRequestStream | undefined): void {
    // Answered meanwhile (a forgotten return: see answeredMidway), or gone while the hooks or
    // callbacks ran (its close already fired, so nothing would remove it).
    if (reply.sent) return
    if (hasLeft(reply.raw)) {
      reply.hijack()
      return
    }
    const ticket = this.admission.admit(request, reply, plan.key)
    if (ticket === null) return
    reply.hijack()
    const subscriber = new Subscriber(plan, reply.raw, this.context)
    const status = STREAM_STATUSES.has(reply.statusCode) ? reply.statusCode : 200
    subscriber.open(status, withReplyHeaders(reply, STREAM_HEADERS), initialFrame.length === 0 ? ticket.retryFrame : Buffer.concat([ticket.retryFrame, initialFrame]))
    // Fastify runs the route's onResponse hooks on a response that finishes; a stream the client
    // leaves never does, so they run here then (request logging, metrics).
    reply.raw.once('close', () => { if (!reply.raw.writableFinished) runOnResponseHooks(request, reply) })
    this.registry.add(subscriber)
    this.fanOut.resume(subscriber, lastEventId)
    if (stream !== undefined) void pumpStream(subscriber, stream, request.log)
  }

  /** The stream's planned end: max age (jittered), or its credentials' expiry when that comes first. */
  private lifetime (asked: number | undefined): Lifetime | null {
    const { maxAgeMs } = this.settings
    const maxAge = maxAgeMs > 0 ? { ms: jittered(maxAgeMs, this.clocks.random, 1), reason: 'expired' as const } : null
    if (asked === undefined) return maxAge
    if (typeof asked !== 'number' || !Number.isFinite(asked)) {
      throw new TypeError(`tower-sse: subscribe()'s expiresAt must be epoch milliseconds, got ${String(asked)}`)
    }
    const ms = Math.min(MAX_TIMER_MS, Math.max(0, asked - this.clocks.now()))
    if (maxAge !== null && maxAge.ms <= ms) return maxAge
    return { ms, reason: 'credentialsExpired' }
  }

  private prepare (request: FastifyRequest, reply: FastifyReply, route: StreamRouteOptions, asked: SubscribeOptions): Prepared | PromiseLike<Prepared> {
    const { settings } = this
    return chain(asked.key ?? (route.keyFn ?? settings.keyFn as KeyFn)(request), (key) => {
      if (typeof key !== 'string') throw new TypeError(`tower-sse: a stream's key must be a string, got ${typeof key}`)
      const topicsFromRequest = route.topicsFromRequest ?? settings.topicsFromRequest
      return chain(asked.topics !== undefined ? asked.topics : topicsFromRequest?.(request), (granted) => {
        const plan: StreamPlan = {
          id: randomUUID(),
          key,
          remoteAddress: request.ip,
          grant: topicSet(granted),
          connectedAt: Date.now(),
          lifetime: this.lifetime(asked.expiresAt)
        }
        const lastEventId = asked.lastEventId !== undefined ? parseEventId(asked.lastEventId ?? undefined) : lastEventIdOf(request)
        const initial = asked.initialEvent !== undefined ? asked.initialEvent : route.initialEvent ?? settings.initialEvent
        const topics: SseClientInfo['topics'] = plan.grant === ALL_TOPICS ? ALL_TOPICS : [...plan.grant]
        const info: SseClientInfo = { ...plan, expiresAt: expiresAt(plan), topics }
        return chain(typeof initial === 'function' ? initial(info, request) : initial ?? undefined, (first) => {
          const prepared = { plan, lastEventId, initialFrame: first === undefined ? EMPTY : encodeEvent(first) }
          // Last, once the app's callbacks have run: the headers its onSend hooks set (a cookie, a session).
          for (const [name, value] of Object.entries(STREAM_HEADERS)) reply.header(name, value)
          return chain(this.runOnSend(request, reply), () => prepared)
        })
      })
    })
  }

  private runOnSend (request: FastifyRequest, reply: FastifyReply): void | Promise<void> {
    this.runningHooks.add(request)
    try {
      const ran = runOnSendHooks(request, reply)
      if (ran === undefined) {
        this.runningHooks.delete(request)
        return undefined
      }
      return ran.finally(() => this.runningHooks.delete(request))
    } catch (error) {
      this.runningHooks.delete(request)
      throw error
    }
  }
}

function isThenable<T> (value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}

/** `next(value)`, at once when the value is plain, once it settles when it is a promise. */
function chain<T, R> (value: T | PromiseLike<T>, next: (value: T) => R | PromiseLike<R>): R | PromiseLike<R> {
  return isThenable(value) ? Promise.resolve(value).then(next) : next(value)
}
