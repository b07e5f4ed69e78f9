import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import { endAndClose, openUntilClose } from '../platform/server-closes-first'
import { hasLeft, unsentBytes } from '../platform/internals'
import { nextTurn } from '../shared/slices'
import type { CloseReason } from '../observe/vocabulary'
import { responseSink, sinkOf, type StreamSink } from '../platform/stream-sink'
import type { TurnQueue, TurnTarget, WriteCoalescer } from './write-coalescer'
import { ALL_TOPICS, type TopicGrant } from '../events/topic'
import { MAX_STALLED_HEARTBEATS } from './stream-options'

/** What the app may know of one open stream (`for (const s of app.sse)`, initialEvent's first argument). */
export interface SseClientInfo {
  readonly id: string
  /** Epoch milliseconds at which the stream was opened. */
  readonly connectedAt: number
  /** Epoch milliseconds at which the server will end the stream, or null without a max age. */
  readonly expiresAt: number | null
  readonly remoteAddress: string | undefined
  /** Whose stream this is (keyFn or subscribe's `key`): `fastify.sse.send({ key })` and `close({ key })` address it. */
  readonly key: string
  /** The topics granted beyond the untopiced events, or ALL_TOPICS. */
  readonly topics: readonly string[] | typeof ALL_TOPICS
}

/** A stream's planned end: `ms` after it opens, counted under `reason`. */
export interface Lifetime {
  ms: number
  reason: CloseReason
}

/** Everything decided about a stream before it opens (initialEvent sees it as SseClientInfo). */
export interface StreamPlan {
  readonly id: string
  readonly key: string
  readonly remoteAddress: string | undefined
  /** The topics granted beyond the untopiced events (ALL_TOPICS: every one). */
  readonly grant: TopicGrant
  /** Whether broadcasts reach it at all (a resumable stream carries its log's events only). */
  readonly broadcasts: boolean
  readonly connectedAt: number
  /** When the server ends the stream, and why (null: never). */
  readonly lifetime: Lifetime | null
}

/** What every stream of one registration shares: its budget, the turn's coalescer, the registry's hand-off. */
export interface StreamContext {
  readonly maxBufferedBytes: number
  readonly coalescer: WriteCoalescer
  /** A fresh jittered `retry:` (widened during a storm), written before every end the server chooses. */
  readonly retryFrame: () => Buffer
  /** Called once when a stream is over, whoever ended it. */
  readonly finished: (subscriber: Subscriber, reason: CloseReason) => void
}

/** Headers of every stream (openUntilClose adds `Connection: close` on HTTP/1.x). */
export const STREAM_HEADERS = Object.freeze({
  'content-type': 'text/event-stream; charset=utf-8',
  // no-transform: an intermediary must not compress or rewrite the stream (that would buffer it).
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no'
})

/** Where an ended stream's frames go: nowhere, and nothing is unsent. */
const CLOSED: StreamSink = Object.freeze({ write: () => {}, writableLength: 0, needsDrain: false, onceDrained: (fn: () => void) => fn() })

/** Ends the server gives up on: no last frame, the connection is cut. */
const ABANDONED: ReadonlySet<CloseReason> = new Set(['dropped', 'deadSwept'])

/**
 * The server's side of one open event stream. Writes never wait: a stream whose unsent bytes would
 * pass its budget is dropped, and one that stays backpressured across heartbeats is swept as dead.
 * The frames it is sent within one turn of the event loop go to its socket as one write (see
 * WriteCoalescer). Every end the server chooses gently is preceded by a fresh jittered `retry:`.
 */
export class Subscriber implements SseClientInfo, TurnTarget {
  readonly id: string
  readonly key: string
  readonly remoteAddress: string | undefined
  readonly grant: TopicGrant
  /** Whether broadcasts reach it at all (false: a resumable stream, which carries its log's events only). */
  readonly broadcasts: boolean
  readonly connectedAt: number
  readonly expiresAt: number | null
  private readonly lifetime: Lifetime | null
  private finished = false
  private stalledBeats = 0
  /** Bytes handed on so far; minus the sink's writableLength, what the socket has taken. */
  private queuedBytes = 0
  /** Frames queued this turn, not yet handed on (the coalescer owns them). */
  private readonly queue: TurnQueue
  /** Where frames go: the response, then, once the head is out, what the platform allows. */
  private sink: StreamSink
  private flushedAtLastBeat = 0
  private unsentAtLastBeat = 0
  private expiryTimer: NodeJS.Timeout | undefined
  /** Called once when the stream is over (made on first use: most streams never need one). */
  private onEnd: Array<() => void> | null = null

  /** The response, until the stream is over: let go then, so that nothing kept of the stream (a handle) keeps its connection. */
  private res: ServerResponse | null

  constructor (plan: StreamPlan, res: ServerResponse, private readonly context: StreamContext) {
    this.res = res
    this.id = plan.id
    this.key = plan.key
    this.remoteAddress = plan.remoteAddress
    this.grant = plan.grant
    this.broadcasts = plan.broadcasts
    this.connectedAt = plan.connectedAt
    this.lifetime = plan.lifetime
    this.expiresAt = expiresAt(plan)
    this.queue = context.coalescer.queueFor(this)
    this.sink = responseSink(res)
  }

  get topics (): readonly string[] | typeof ALL_TOPICS {
    return this.grant === ALL_TOPICS ? ALL_TOPICS : [...this.grant]
  }

  /** Sends the head and the first frames in one write, and arms the expiry timer. */
  open (status: number, headers: OutgoingHttpHeaders, firstFrames: Buffer): void {
    const res = this.res as ServerResponse
    res.on('close', () => this.finish('disconnected'))
    openUntilClose(res, status, headers)
    this.queuedBytes += firstFrames.length
    // As latin1 text (the same bytes): Node sends a string together with the head in one buffer,
    // a Buffer as a second chunk of a writev — measured at ~40 µs more CPU per stream opened.
    res.write(firstFrames.toString('latin1'), 'latin1')
    this.sink = sinkOf(res)
    const { lifetime } = this
    if (lifetime !== null) {
      this.expiryTimer = setTimeout(() => this.end(lifetime.reason), lifetime.ms)
      this.expiryTimer.unref()
    }
  }

  /** Frame bytes handed to this stream so far (stats().bytesSent adds them up). */
  get bytesQueued (): number {
    return this.queuedBytes
  }

  wants (topic: string | undefined): boolean {
    return this.broadcasts && (topic === undefined || this.grant === ALL_TOPICS || this.grant.has(topic))
  }

  /** Whether `bytes` more could be queued now without passing this stream's unsent-bytes budget. */
  fits (bytes: number): boolean {
    return this.queue.bytes + this.sink.writableLength + bytes <= this.context.maxBufferedBytes
  }

  /**
   * Queues one encoded frame for this turn's write; false when the client is gone or was dropped
   * because its unsent bytes (queued this turn + not yet taken by the socket) would pass its budget.
   */
  write (frame: Buffer): boolean {
    if (this.finished) return false
    if (!this.fits(frame.length)) {
      this.end('dropped')
      return false
    }
    this.queue.push(frame)
    return true
  }

  /**
   * This turn's frames, joined, in one write (the coalescer calls it at the turn's end): one Buffer
   * and one write cost less than a write per frame under cork/uncork, and the streams of a burst
   * share the one joined Buffer.
   */
  send (joined: Buffer): void {
    this.queuedBytes += joined.length
    this.sink.write(joined)
  }

  /**
   * Called by the shared heartbeat timer. A backpressured client gets no heartbeat; one whose
   * socket has taken no byte for maxStalledHeartbeats beats in a row is swept as dead. A slow
   * but live reader keeps making progress and is left alone.
   */
  heartbeat (frame: Buffer): void {
    const { res } = this
    if (this.finished || res === null) return
    if (hasLeft(res)) {
      this.end('deadSwept')
      return
    }
    const flushed = this.queuedBytes - this.sink.writableLength
    // A reader taking a burst slowly shows its progress only in the transport's queue (see platform/internals.ts).
    const unsent = unsentBytes(res)
    const progressed = flushed !== this.flushedAtLastBeat || unsent < this.unsentAtLastBeat
    this.flushedAtLastBeat = flushed
    this.unsentAtLastBeat = unsent
    if (this.sink.needsDrain) {
      this.stalledBeats = progressed ? 0 : this.stalledBeats + 1
      if (this.stalledBeats >= MAX_STALLED_HEARTBEATS) this.end('deadSwept')
      return
    }
    this.stalledBeats = 0
    this.write(frame)
  }

  /** The waits under way (whileOpen), woken when the stream ends; each removes itself when it settles. */
  private waits: Set<() => void> | null = null
  /** Why the stream ended (null while it is open). */
  private ended: CloseReason | null = null

  get isOver (): boolean {
    return this.finished
  }

  get endReason (): CloseReason | null {
    return this.ended
  }

  /** Calls `fn` once the stream is over, however it ends (at once if it already is). */
  whenOver (fn: () => void): void {
    if (this.finished) fn()
    else (this.onEnd ??= []).push(fn)
  }

  /**
   * Resolves true once `bytes` more fit the budget with `reserve` bytes of it left over (or once
   * nothing is unsent), false once the stream is over. Waits for the transport's drain, or for the
   * turn's end when the bytes are still queued this turn.
   */
  async whenFits (bytes: number, reserve = 0): Promise<boolean> {
    while (!this.finished && !this.fits(bytes + reserve) && this.queue.bytes + this.sink.writableLength > 0) {
      if (this.sink.needsDrain) {
        await this.whileOpen(new Promise<void>((resolve) => this.sink.onceDrained(resolve)))
      } else {
        await nextTurn()
      }
    }
    return !this.finished
  }

  /**
   * `promise`'s value, or undefined as soon as the stream is over, whichever comes first. The wait
   * adds nothing to the stream that outlives it (no reaction piles up on a shared promise of its
   * end), and once the stream is over nothing of it is reachable from a `promise` that never settles.
   */
  whileOpen<T> (promise: PromiseLike<T>): Promise<T | undefined> {
    if (this.finished) return Promise.resolve(undefined)
    // The reactions on `promise` reach the set of waits, never the stream itself.
    const waits = this.waits ??= new Set()
    return new Promise<T | undefined>((resolve, reject) => {
      const wake = (): void => resolve(undefined)
      waits.add(wake)
      promise.then((value) => {
        waits.delete(wake)
        resolve(value)
      }, (error: unknown) => {
        waits.delete(wake)
        reject(error)
      })
    })
  }

  /**
   * Server-side end, counted under `reason`: a fresh `retry:` as the last frame, then the stream
   * ends and the server closes the socket — or, for a stream given up on, the socket is cut.
   */
  end (reason: CloseReason): void {
    const { res } = this
    if (this.finished || res === null) return
    if (ABANDONED.has(reason)) {
      this.finish(reason)
      // Its queued bytes would only delay the close of a client we are giving up on.
      res.destroy()
    } else {
      // A stream at its budget ends without it: its first retry: stands.
      const retry = this.context.retryFrame()
      if (this.fits(retry.length)) this.queue.push(retry)
      // What this turn queued goes out with the end, before the server's FIN.
      const last = this.queue.take()
      if (last !== undefined) this.queuedBytes += last.length
      this.finish(reason)
      endAndClose(res, last)
    }
  }

  private finish (reason: CloseReason): void {
    if (this.finished) return
    this.finished = true
    this.ended = reason
    this.res = null
    this.sink = CLOSED
    // A stream that is over sends nothing more: what it had queued is let go.
    this.queue.clear()
    clearTimeout(this.expiryTimer)
    this.context.finished(this, reason)
    const { onEnd, waits } = this
    this.onEnd = null
    this.waits = null
    for (const fn of onEnd ?? []) fn()
    for (const wake of waits ?? []) wake()
  }
}

/** When a plan's stream will be ended (epoch ms), or null. */
export function expiresAt (plan: StreamPlan): number | null {
  return plan.lifetime === null ? null : plan.connectedAt + plan.lifetime.ms
}
