import { randomId } from '../shared/random-id'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Admission, Ticket } from '../admission/admission'
import { endAndClose, openUntilClose } from '../platform/server-closes-first'
import { encodeAppEvent, type SseEventInit } from '../events/encoder'
import { jittered } from '../shared/jitter'
import type { Clocks } from '../shared/clocks'
import { MAX_TIMER_MS } from '../shared/option-rules'
import { hasLeft } from '../platform/internals'
import { hasOnResponseHooks, onSendHookCount, runOnResponseHooks, runOnSendHooks } from '../platform/route-hooks'
import type { KeyFn } from '../admission/request-key'
import type { Registry } from '../streams/registry'
import type { FanOut } from '../streams/fan-out'
import type { StreamStats } from '../observe/stats'
import { expiresAt, Subscriber, STREAM_HEADERS, type Lifetime, type SseClientInfo, type StreamContext, type StreamPlan } from '../streams/subscriber'
import { lastEventIdOf, lastEventIdText, resumePointOf, topicSet, type ResumePoint, type TopicsGranted } from './stream-request'
import { ALL_TOPICS } from '../events/topic'
import { withReplyHeaders } from '../shared/reply-headers'
import type { InitialEvent, RouteSettings, StreamRouteOptions } from './route-options'
import { checkSource, pump, release, type StreamSource } from './per-request'
import { notOpened, OpenStream, type StreamHandle } from './stream-handle'
import type { Resumables, ResumableAsk, ResumeDecision } from '../resumable/resumables'
import { isStreamId } from '../resumable/resumable-id'
import { StreamNotFoundError } from '../errors'

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
   * This connection's own events: an async iterable (an async generator, a Readable in object mode)
   * of `{ data, event?, id?, retry? }`, or a function `({ id, signal }) => iterable` called once the
   * stream is open. Sent to this stream only, each next item pulled once the previous is written
   * within half the byte budget. When the iterable finishes, the stream gets `event: end` and the
   * server closes it (unless `keepOpen`); a failure is logged, sent as `event: error`, and ends the
   * stream with a `retry:`. The stream's end returns the iterator; an iterable whose stream never
   * opens is released (returned, or a Readable destroyed). Not kept in history: a reconnect does
   * not replay it.
   */
  stream?: StreamSource
  /** With `stream`: stay open for broadcasts once it finishes, instead of ending with `event: end`. */
  keepOpen?: boolean
  /**
   * With `stream`: make it a resumable answer ([Streaming an answer](docs/streaming-an-answer.md)).
   * Its events go to a log of their own, not to this connection: a reconnect with the Last-Event-ID
   * of one of them, on any instance sharing the bus, gets the rest, then the live tail, then the
   * end — the factory is not called again, a new iterable is released. `id`: the app's name for it
   * (1-64 of A-Z a-z 0-9 _ -; default: an unguessable one); `ttlMs`: how long the log is kept
   * after its end (default 10 minutes).
   */
  resumable?: { id?: string, ttlMs?: number } | true
}

/** How long a resumable stream's log is kept after its end, by default. */
export const RESUMABLE_TTL_MS = 10 * 60_000

/** The plugin's settings the opener reads. */
export type OpenerSettings = Pick<RouteSettings, 'keyFn' | 'topicsFromRequest' | 'initialEvent'> & { maxAgeMs: number, maxBufferedBytes: number }

/** Everything a stream needs, resolved before admission decides and before any byte is written. */
interface Prepared {
  plan: StreamPlan
  lastEventId: ResumePoint
  /** The initial event's frame, encoded (empty: none). */
  initialFrame: Buffer
  /** For a resumable stream: where its request stands. */
  resumable: { decision: ResumeDecision, ttlMs: number } | undefined
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
    private readonly resumables: Resumables,
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
  open (request: FastifyRequest, reply: FastifyReply, route: StreamRouteOptions, asked: SubscribeOptions = {}): Promise<StreamHandle> {
    let source: StreamSource | undefined
    const failed = (error: unknown): Promise<StreamHandle> => {
      this.pending.delete(request)
      release(source, request.log)
      // A bad or forbidden subscription is the client's (400, 403); anything else is the app's, and counted.
      const status = (error as { statusCode?: number } | null)?.statusCode
      if (status !== 400 && status !== 403) this.stats.failedOpen()
      if (reply.sent) {
        // Fastify answered already (the handler did not return this promise): nobody is waiting on it.
        request.log.error({ err: error }, 'tower-sse: an event stream could not open')
        return Promise.resolve(notOpened())
      }
      return Promise.reject(error)
    }
    let resumable: ResumableAsk | undefined
    try {
      source = asked.stream === undefined ? undefined : checkSource(asked.stream)
      resumable = resumableAsk(asked, source)
    } catch (error) {
      return failed(error)
    }
    if (request.method === 'HEAD') {
      // The stream's headers and the close at once: a stream answered without a body would hold
      // a slot and a `curl -I` until max age.
      reply.hijack()
      openUntilClose(reply.raw, 200, withReplyHeaders(reply, STREAM_HEADERS))
      endAndClose(reply.raw)
      release(source, request.log)
      return Promise.resolve(notOpened())
    }
    let prepared: Prepared | PromiseLike<Prepared>
    try {
      prepared = this.prepare(request, reply, route, asked, resumable)
    } catch (error) {
      return failed(error)
    }
    if (!isThenable(prepared)) return Promise.resolve(this.start(request, reply, prepared, source, asked.keepOpen === true))
    this.pending.add(request)
    return Promise.resolve(prepared).then((ready) => {
      this.pending.delete(request)
      return this.start(request, reply, ready, source, asked.keepOpen === true)
    }, failed)
  }

  /** In one turn, nothing awaited: the client is still there, admission admits, the stream opens. */
  private start (request: FastifyRequest, reply: FastifyReply, { plan, lastEventId, initialFrame, resumable }: Prepared, source: StreamSource | undefined, keepOpen: boolean): StreamHandle {
    const decision = resumable?.decision
    if (decision?.kind === 'notFound' || decision?.kind === 'done') {
      // No stream: nothing of it is left to send (204: EventSource stops reconnecting), or there is
      // none for this client to see (404, as for an id that never was).
      release(source, request.log)
      if (!reply.sent) answerWithoutStream(reply, decision.kind === 'done' ? 204 : 404)
      return notOpened()
    }
    if (decision?.kind === 'unavailable') {
      release(source, request.log)
      if (!reply.sent) this.admission.refuseLogUnavailable(reply)
      return notOpened()
    }
    const ticket = this.ticket(request, reply, plan.key)
    if (ticket === null) {
      release(source, request.log)
      return notOpened()
    }
    const subscriber = new Subscriber(plan, reply.raw, this.context)
    const status = STREAM_STATUSES.has(reply.statusCode) ? reply.statusCode : 200
    subscriber.open(status, withReplyHeaders(reply, STREAM_HEADERS), initialFrame.length === 0 ? ticket.retryFrame : Buffer.concat([ticket.retryFrame, initialFrame]))
    // Fastify runs the route's onResponse hooks on a response that finishes; a stream the client
    // leaves never does, so they run here then (request logging, metrics).
    if (hasOnResponseHooks(request)) reply.raw.once('close', () => { if (!reply.raw.writableFinished) runOnResponseHooks(request, reply) })
    this.registry.add(subscriber)
    const handle = new OpenStream(subscriber)
    if (decision !== undefined && resumable !== undefined && source !== undefined) {
      this.stats.resumed(decision.kind === 'new' ? 'fresh' : decision.kind === 'attach' ? 'replayed' : 'resync', 0)
      this.resumables.feed(subscriber, decision, plan.key, resumable.ttlMs, source, () => release(source, request.log))
      return handle
    }
    this.fanOut.resume(subscriber, lastEventId)
    if (source !== undefined) void pump(subscriber, source, request.log, keepOpen, this.settings.maxBufferedBytes, handle)
    return handle
  }

  /**
   * Admission's ticket for a request still waiting for its stream, or null: answered meanwhile (a
   * forgotten return, see answeredMidway), gone while the hooks or callbacks ran (its close already
   * fired, so nothing would remove it), or refused (answered, or held in the tarpit).
   */
  private ticket (request: FastifyRequest, reply: FastifyReply, key: string): Ticket | null {
    if (reply.sent) return null
    if (hasLeft(reply.raw)) {
      reply.hijack()
      return null
    }
    const ticket = this.admission.admit(request, reply, key)
    if (ticket !== null) reply.hijack()
    return ticket
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

  private prepare (request: FastifyRequest, reply: FastifyReply, route: StreamRouteOptions, asked: SubscribeOptions, resumable: ResumableAsk | undefined): Prepared | PromiseLike<Prepared> {
    const { settings } = this
    return chain(asked.key ?? (route.keyFn ?? settings.keyFn as KeyFn)(request), (key) => {
      if (typeof key !== 'string') throw new TypeError(`tower-sse: a stream's key must be a string, got ${typeof key}`)
      if (resumable === undefined) return this.prepareStream(request, reply, route, asked, key, undefined)
      const sent = asked.lastEventId !== undefined ? asked.lastEventId ?? undefined : lastEventIdText(request)
      return chain(this.resumables.decide(key, sent, resumable), (decision) =>
        this.prepareStream(request, reply, route, asked, key, { decision, ttlMs: resumable.ttlMs }))
    })
  }

  /** What a stream of `key` is, and its first frames, once the app's callbacks and onSend hooks have run. */
  private prepareStream (request: FastifyRequest, reply: FastifyReply, route: StreamRouteOptions, asked: SubscribeOptions, key: string, resumable: Prepared['resumable']): Prepared | PromiseLike<Prepared> {
    const { settings } = this
    const topicsFromRequest = route.topicsFromRequest ?? settings.topicsFromRequest
    // A resumable stream carries its log's events only: a broadcast's id in between would break its resume.
    return chain(resumable !== undefined ? null : asked.topics !== undefined ? asked.topics : topicsFromRequest?.(request), (granted) => {
      const plan: StreamPlan = {
        id: randomId(),
        key,
        remoteAddress: request.ip,
        grant: topicSet(granted),
        broadcasts: resumable === undefined,
        connectedAt: Date.now(),
        lifetime: this.lifetime(asked.expiresAt)
      }
      const lastEventId = resumable !== undefined ? null : asked.lastEventId !== undefined ? resumePointOf(asked.lastEventId) : lastEventIdOf(request)
      const initial = asked.initialEvent !== undefined ? asked.initialEvent : route.initialEvent ?? settings.initialEvent
      return chain(typeof initial === 'function' ? initial(infoOf(plan), request) : initial ?? undefined, (first) => {
        const prepared = { plan, lastEventId, initialFrame: first === undefined ? EMPTY : encodeAppEvent(first), resumable }
        // Answered meanwhile (a forgotten return): its onSend hooks ran on that answer already. And
        // a route whose one onSend hook is the plugin's own (a forgotten return's) has none to run.
        if (reply.sent || onSendHookCount(request) <= 1) return prepared
        // Last, once the app's callbacks have run: the headers its onSend hooks set (a cookie, a session).
        for (const [name, value] of Object.entries(STREAM_HEADERS)) reply.header(name, value)
        return chain(this.runOnSend(request, reply), () => prepared)
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

/** The `resumable` option of subscribe(), checked: it needs a `stream`, and takes no `keepOpen`. */
function resumableAsk (asked: SubscribeOptions, source: StreamSource | undefined): ResumableAsk | undefined {
  const given = asked.resumable
  if (given === undefined) return undefined
  const wrong = (what: string): never => { throw new TypeError(`tower-sse: subscribe()'s resumable ${what}`) }
  if (source === undefined) wrong('needs a stream: the answer whose events it keeps')
  if (asked.keepOpen === true) wrong('cannot keepOpen: a resumable stream ends with its answer')
  const options = given === true ? {} : given
  if (typeof options !== 'object' || options === null) return wrong(`must be true or { id?, ttlMs? }, got ${String(given)}`)
  const { id, ttlMs = RESUMABLE_TTL_MS } = options
  if (id !== undefined && !isStreamId(id)) wrong(`id must be 1-64 characters of A-Z a-z 0-9 _ -, got ${JSON.stringify(id)}`)
  if (!Number.isSafeInteger(ttlMs) || ttlMs < 1 || ttlMs > 7 * 24 * 3_600_000) wrong(`ttlMs must be an integer of ms between 1 and 604800000 (a week), got ${String(ttlMs)}`)
  return id === undefined ? { ttlMs } : { id, ttlMs }
}

/** A request answered without a stream, the server closing first: 204 (nothing more will come) or 404 (no such stream). */
function answerWithoutStream (reply: FastifyReply, status: 204 | 404): void {
  reply.hijack()
  if (status === 204) {
    openUntilClose(reply.raw, 204, withReplyHeaders(reply, { 'cache-control': 'no-store' }))
    endAndClose(reply.raw)
    return
  }
  const error = new StreamNotFoundError()
  openUntilClose(reply.raw, 404, withReplyHeaders(reply, { 'cache-control': 'no-store', 'content-type': 'application/json; charset=utf-8' }))
  endAndClose(reply.raw, JSON.stringify({ statusCode: 404, code: error.code, error: 'Not Found', message: error.message }))
}

/** What initialEvent is shown of a stream about to open. */
function infoOf (plan: StreamPlan): SseClientInfo {
  const topics: SseClientInfo['topics'] = plan.grant === ALL_TOPICS ? ALL_TOPICS : [...plan.grant]
  return { id: plan.id, key: plan.key, remoteAddress: plan.remoteAddress, connectedAt: plan.connectedAt, expiresAt: expiresAt(plan), topics }
}
