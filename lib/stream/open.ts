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
import { Subscriber, STREAM_HEADERS } from '../streams/subscriber'
import { lastEventIdOf, topicSet, topicsFromQuery, type TopicsFromRequest } from './stream-request'
import type { WriteCoalescer } from '../streams/write-coalescer'
import { withReplyHeaders } from '../shared/reply-headers'

const EMPTY = Buffer.alloc(0)

/** What one stream route may set for itself (the route option `eventStream: { … }`); the plugin's options fill the rest. */
export interface StreamRouteOptions {
  keyFn?: KeyFn
  topicsFromRequest?: TopicsFromRequest
  initialEvent?: InitialEvent
}

/** What a handler may decide for this one stream (`reply.eventStream.subscribe({ … })`); omitted: the route's and plugin's hooks decide. */
export interface SubscribeOptions {
  /** Topics (null: every event); default: the route's topicsFromRequest, else `?topics=a,b`. */
  topics?: readonly string[] | null
  /** Whose stream this is, for maxClientsPerKey; default: the route's keyFn (e.g. `request.user.id`). */
  key?: string
  /** Where to resume (null: nowhere); default: the `Last-Event-ID` header or `?lastEventId=`. */
  lastEventId?: string | null
  /** The first event (or a hook that builds it from the client); default: the route's initialEvent. */
  initialEvent?: SseEventInit | InitialEvent | null
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
      // A bad subscription is the client's (400); anything else is the app's, and counted.
      if ((error as { statusCode?: number } | null)?.statusCode !== 400) this.stats.failedOpen()
      return Promise.reject(error)
    }
    let prepared: Prepared | PromiseLike<Prepared>
    try {
      prepared = this.prepare(request, reply, route, asked)
    } catch (error) {
      return failed(error)
    }
    // Settled with nothing (a reply is thenable: resolving with it would wait for the stream's end).
    if (!isThenable(prepared)) return Promise.resolve(this.start(request, reply, prepared))
    return Promise.resolve(prepared).then((ready) => this.start(request, reply, ready), failed)
  }

  /**
   * In one turn, nothing awaited: the client is still there, admission admits, the stream opens.
   * The reply is hijacked on every path (a refusal held in the tarpit included), so Fastify
   * never answers it too.
   */
  private start (request: FastifyRequest, reply: FastifyReply, { client, lastEventId, initialFrame }: Prepared): void {
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
  }

  private prepare (request: FastifyRequest, reply: FastifyReply, route: StreamRouteOptions, asked: SubscribeOptions): Prepared | PromiseLike<Prepared> {
    const { options } = this
    return then(asked.key ?? (route.keyFn ?? options.keyFn)(request), (key) => {
      if (typeof key !== 'string') throw new TypeError(`tower-sse: a stream's key must be a string, got ${typeof key}`)
      const topicsFromRequest = route.topicsFromRequest ?? options.topicsFromRequest ?? topicsFromQuery
      return then(asked.topics !== undefined ? asked.topics : topicsFromRequest(request), (wanted) => {
        const topics = topicSet(wanted)
        const lastEventId = asked.lastEventId !== undefined ? parseEventId(asked.lastEventId ?? undefined) : lastEventIdOf(request)
        const lifetimeMs = options.maxAgeMs > 0 ? jitter(options.maxAgeMs, options.maxAgeJitterMs, options.random, 1) : null
        const client = new Subscriber(randomUUID(), request.ip, key, topics, reply.raw, options, this.registry.remove, this.turn, lifetimeMs)
        const initial = asked.initialEvent !== undefined ? asked.initialEvent : route.initialEvent ?? options.initialEvent
        return then(typeof initial === 'function' ? initial(client, request) : initial ?? undefined, (first) =>
          ({ client, lastEventId, initialFrame: first === undefined ? EMPTY : encodeEvent(first) }))
      })
    })
  }
}

function isThenable<T> (value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}

/** `next(value)`, at once when the value is plain, once it settles when it is a promise. */
function then<T, R> (value: T | PromiseLike<T>, next: (value: T) => R | PromiseLike<R>): R | PromiseLike<R> {
  return isThenable(value) ? Promise.resolve(value).then(next) : next(value)
}
