import { randomUUID } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Admission } from '../admission/admission'
import { endAndClose, openUntilClose } from '../platform/server-closes-first'
import { encodeEvent } from '../events/encoder'
import { parseEventId, type ParsedEventId } from '../bus/event-id'
import { jitter } from '../shared/jitter'
import type { InitialEvent, NormalizedOptions, SseEventInit } from '../options'
import { hasLeft } from '../platform/internals'
import type { KeyFn } from '../admission/request-key'
import type { SseRegistry } from '../streams/registry'
import type { StreamStats } from '../observe/stats'
import { Subscriber, STREAM_HEADERS, type Lifetime } from '../streams/subscriber'
import { lastEventIdOf, topicSet, type TopicsFromRequest, type TopicsGranted } from './stream-request'
import type { WriteCoalescer } from '../streams/write-coalescer'
import { withReplyHeaders } from '../shared/reply-headers'
import { pumpStream, type PerRequestStream } from './per-request'

const EMPTY = Buffer.alloc(0)

/** What one stream route may set for itself (the route option `eventStream: { … }`); the plugin's options fill the rest. */
export interface StreamRouteOptions {
  keyFn?: KeyFn
  topicsFromRequest?: TopicsFromRequest
  initialEvent?: InitialEvent
}

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
  /** The first event (or a hook that builds it from the client); default: the route's initialEvent. */
  initialEvent?: SseEventInit | InitialEvent | null
  /**
   * Epoch ms after which the stream's credentials are no longer good (a token's `exp` × 1000):
   * the stream then ends with a jittered `retry:`, counted as `credentialsExpired`, if max age
   * has not ended it first. Its client reconnects and authenticates again.
   */
  expiresAt?: number
  /**
   * This connection's own events (an async generator, a Readable in object mode), each
   * `{ data, event?, id? }`, sent to it only, the next one pulled once the previous fits its byte
   * budget. The stream's end calls the iterator's return(); when the iterable ends, the stream
   * stays open for broadcasts; a throw is logged and ends the stream with a `retry:`, counted as
   * `streamFailed`. Not kept in history: a reconnect does not replay it (broadcast to a topic for that).
   */
  stream?: PerRequestStream
}

/** Everything a stream needs, resolved before any byte of it is written. */
interface Prepared {
  client: Subscriber
  lastEventId: ParsedEventId | null
  /** The initial event's frame, encoded (empty: none). */
  initialFrame: Buffer
}

/**
 * Opens event streams: the one place that does. Every user callback runs and every first frame is
 * encoded first; a throw or an unencodable value rejects (the route answers 500 through the app's
 * error handler and Fastify logs it), counted, with nothing written. Then, in one turn with no
 * await: a client that already left is dropped without a slot, admission answers once (a ticket,
 * or a refusal it wrote), and the admitted stream is written with the ticket's `retry:` and added
 * to the registry.
 */
export class StreamOpener {
  constructor (
    private readonly registry: SseRegistry,
    private readonly admission: Admission,
    private readonly stats: StreamStats,
    private readonly options: NormalizedOptions,
    private readonly turn: WriteCoalescer
  ) {}

  /**
   * Synchronous while every callback is: the stream then opens in the turn its request arrived,
   * as a connection's pipelined requests are parsed (and must already see it holding a stream).
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
    const failed = (error: unknown): Promise<never> => {
      // A bad or forbidden subscription is the client's (400, 403); anything else is the app's, and counted.
      const status = (error as { statusCode?: number } | null)?.statusCode
      if (status !== 400 && status !== 403) this.stats.failedOpen()
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
    return Promise.resolve(prepared).then((ready) => this.start(request, reply, ready, asked.stream), failed)
  }

  /**
   * In one turn, nothing awaited: the client is still there, admission admits, the stream opens.
   * The reply is hijacked on every path (a refusal held in the tarpit included), so Fastify
   * never answers it too.
   */
  private start (request: FastifyRequest, reply: FastifyReply, { client, lastEventId, initialFrame }: Prepared, stream: PerRequestStream | undefined): void {
    // Gone while the hooks or callbacks ran: its close already fired, so nothing would remove it.
    if (hasLeft(reply.raw)) {
      reply.hijack()
      return
    }
    const answer = this.admission.admit(request, reply, client.key)
    if (answer.kind === 'refused') return
    reply.hijack()
    client.open(withReplyHeaders(reply, STREAM_HEADERS), initialFrame.length === 0 ? answer.retryFrame : Buffer.concat([answer.retryFrame, initialFrame]))
    answer.opened()
    this.registry.add(client, lastEventId)
    if (stream !== undefined) void pumpStream(client, stream, request.log, () => this.admission.retryFrame())
  }

  /** The stream's planned end: max age (jittered), or its credentials' expiry when that comes first. */
  private lifetime (expiresAt: number | undefined): Lifetime | null {
    const { options } = this
    const maxAge = options.maxAgeMs > 0 ? { ms: jitter(options.maxAgeMs, options.maxAgeJitterMs, options.random, 1), reason: 'expired' as const } : null
    if (expiresAt === undefined) return maxAge
    if (typeof expiresAt !== 'number' || !Number.isFinite(expiresAt)) {
      throw new TypeError(`tower-sse: subscribe()'s expiresAt must be epoch milliseconds, got ${String(expiresAt)}`)
    }
    const ms = Math.min(MAX_TIMER_MS, Math.max(0, expiresAt - options.now()))
    if (maxAge !== null && maxAge.ms <= ms) return maxAge
    return { ms, reason: 'credentialsExpired', lastFrames: this.admission.retryFrame() }
  }

  private prepare (request: FastifyRequest, reply: FastifyReply, route: StreamRouteOptions, asked: SubscribeOptions): Prepared | PromiseLike<Prepared> {
    const { options } = this
    return then(asked.key ?? (route.keyFn ?? options.keyFn)(request), (key) => {
      if (typeof key !== 'string') throw new TypeError(`tower-sse: a stream's key must be a string, got ${typeof key}`)
      const topicsFromRequest = route.topicsFromRequest ?? options.topicsFromRequest
      return then(asked.topics !== undefined ? asked.topics : topicsFromRequest?.(request), (granted) => {
        const topics = topicSet(granted)
        const lastEventId = asked.lastEventId !== undefined ? parseEventId(asked.lastEventId ?? undefined) : lastEventIdOf(request)
        const client = new Subscriber(randomUUID(), request.ip, key, topics, reply.raw, options, this.registry.remove, this.turn, this.lifetime(asked.expiresAt))
        const initial = asked.initialEvent !== undefined ? asked.initialEvent : route.initialEvent ?? options.initialEvent
        return then(typeof initial === 'function' ? initial(client, request) : initial ?? undefined, (first) =>
          ({ client, lastEventId, initialFrame: first === undefined ? EMPTY : encodeEvent(first) }))
      })
    })
  }
}

/** The longest a timer waits: a credential's remaining time is capped to it. */
const MAX_TIMER_MS = 2 ** 31 - 1

function isThenable<T> (value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}

/** `next(value)`, at once when the value is plain, once it settles when it is a promise. */
function then<T, R> (value: T | PromiseLike<T>, next: (value: T) => R | PromiseLike<R>): R | PromiseLike<R> {
  return isThenable(value) ? Promise.resolve(value).then(next) : next(value)
}
