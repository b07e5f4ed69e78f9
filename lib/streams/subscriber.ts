import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import { endAndClose, openUntilClose } from '../platform/server-closes-first'
import { hasLeft, needsDrain, unsentBytes } from '../platform/internals'
import type { SseClientInfo } from '../options'
import type { CloseReason } from '../observe/vocabulary'
import type { Flushable, WriteCoalescer } from './write-coalescer'
import { ALL_TOPICS, type TopicGrant } from '../stream/stream-request'

/** A stream's planned end: `ms` after it opens, counted under `reason`, after `lastFrames` (a `retry:`). */
export interface Lifetime {
  ms: number
  reason: CloseReason
  lastFrames?: Buffer
}

export interface StreamLimits {
  maxBufferedBytes: number
  maxStalledHeartbeats: number
}

/** Headers of every stream (openUntilClose adds `Connection: close` on HTTP/1.x). */
export const STREAM_HEADERS = Object.freeze({
  'content-type': 'text/event-stream; charset=utf-8',
  // no-transform: an intermediary must not compress or rewrite the stream (that would buffer it).
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no'
})

/**
 * The server's side of one open event stream (a subscriber; the reconnecting client package is
 * `lib/client/`, a request's owner for limits is its key, `lib/stream/request-key.ts`). Writes never wait: a client whose unsent bytes would pass its budget
 * is dropped, and one that stays backpressured across heartbeats is swept as dead. The frames it
 * is sent within one turn of the event loop go to its socket as one write (see WriteCoalescer).
 */
export class Subscriber implements SseClientInfo, Flushable {
  readonly connectedAt = Date.now()
  /** When the server ends the stream (null: never); planned before it opens, so initialEvent sees it. */
  readonly expiresAt: number | null
  private finished = false
  private stalledBeats = 0
  /** Bytes handed to the response so far; minus its writableLength, what the socket has taken. */
  private queuedBytes = 0
  /** Frames queued this turn, not yet handed to the response, and their bytes. */
  private readonly pending: Buffer[] = []
  private pendingBytes = 0
  private flushedAtLastBeat = 0
  private unsentAtLastBeat = 0
  private expiryTimer: NodeJS.Timeout | undefined

  constructor (
    readonly id: string,
    readonly remoteAddress: string | undefined,
    /** Whose stream this is, for maxClientsPerKey. */
    readonly key: string,
    /** The topics granted beyond the untopiced events (ALL_TOPICS: every one). */
    readonly grant: TopicGrant,
    private readonly res: ServerResponse,
    private readonly limits: StreamLimits,
    private readonly onFinish: (client: Subscriber, reason: CloseReason) => void,
    private readonly turn: WriteCoalescer,
    /** When the server ends the stream, why, and what it is sent last (null: never). */
    private readonly lifetime: Lifetime | null
  ) {
    this.expiresAt = lifetime === null ? null : this.connectedAt + lifetime.ms
  }

  get topics (): readonly string[] | typeof ALL_TOPICS {
    return this.grant === ALL_TOPICS ? ALL_TOPICS : [...this.grant]
  }

  /** Sends the headers and the first frames in one write, and arms the expiry timer. */
  open (headers: OutgoingHttpHeaders, firstFrames: Buffer): void {
    this.res.on('close', () => this.finish('disconnected'))
    openUntilClose(this.res, 200, headers)
    this.queuedBytes += firstFrames.length
    this.res.write(firstFrames)
    const { lifetime } = this
    if (lifetime !== null) {
      this.expiryTimer = setTimeout(() => {
        if (lifetime.lastFrames !== undefined) this.write(lifetime.lastFrames)
        this.end(lifetime.reason)
      }, lifetime.ms)
      this.expiryTimer.unref()
    }
  }

  /** Frame bytes handed to this stream so far (stats().bytesSent adds them up). */
  get bytesQueued (): number {
    return this.queuedBytes
  }

  wants (topic: string | undefined): boolean {
    return topic === undefined || this.grant === ALL_TOPICS || this.grant.has(topic)
  }

  /** Whether `bytes` more could be queued now without passing this stream's unsent-bytes budget. */
  fits (bytes: number): boolean {
    return this.pendingBytes + this.res.writableLength + bytes <= this.limits.maxBufferedBytes
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
    if (this.pending.length === 0) this.turn.mark(this)
    this.pending.push(frame)
    this.pendingBytes += frame.length
    return true
  }

  /** Hands this turn's frames to the response in one write (WriteCoalescer calls it at the turn's end). */
  flush (): void {
    const frames = this.takePending()
    if (frames === undefined) return
    this.queuedBytes += frames.length
    this.res.write(frames)
  }

  /**
   * This turn's frames as one Buffer (undefined: none). One Buffer and one write was cheaper than
   * a write per frame under cork/uncork (one writev) in a micro-measure on loopback: per stream and
   * burst, 10 frames 9.3 µs vs 10.3 µs, 50 frames 11.6 µs vs 18.9 µs.
   */
  private takePending (): Buffer | undefined {
    const { pending } = this
    if (pending.length === 0) return undefined
    const frames = this.turn.join(pending, this.pendingBytes)
    pending.length = 0
    this.pendingBytes = 0
    return frames
  }

  /**
   * Called by the shared heartbeat timer. A backpressured client gets no heartbeat; one whose
   * socket has taken no byte for maxStalledHeartbeats beats in a row is swept as dead. A slow
   * but live reader keeps making progress and is left alone.
   */
  heartbeat (frame: Buffer): void {
    if (this.finished) return
    if (hasLeft(this.res)) {
      this.end('deadSwept')
      return
    }
    const flushed = this.queuedBytes - this.res.writableLength
    // A reader taking a burst slowly shows its progress only in the transport's queue (see platform/internals.ts).
    const unsent = unsentBytes(this.res)
    const progressed = flushed !== this.flushedAtLastBeat || unsent < this.unsentAtLastBeat
    this.flushedAtLastBeat = flushed
    this.unsentAtLastBeat = unsent
    if (needsDrain(this.res)) {
      this.stalledBeats = progressed ? 0 : this.stalledBeats + 1
      if (this.stalledBeats >= this.limits.maxStalledHeartbeats) this.end('deadSwept')
      return
    }
    this.stalledBeats = 0
    this.write(frame)
  }

  /** Server-side end: counted under `reason`, then the stream ends and the server closes the socket. */
  end (reason: CloseReason): void {
    if (this.finished) return
    if (reason === 'dropped' || reason === 'deadSwept') {
      this.finish(reason)
      // Its queued bytes would only delay the close of a client we are giving up on.
      this.res.destroy()
    } else {
      // What this turn queued goes out with the end, before the server's FIN.
      const last = this.takePending()
      if (last !== undefined) this.queuedBytes += last.length
      this.finish(reason)
      endAndClose(this.res, last)
    }
  }

  private finish (reason: CloseReason): void {
    if (this.finished) return
    this.finished = true
    // A stream that is over sends nothing more: what it had queued is let go.
    this.pending.length = 0
    this.pendingBytes = 0
    clearTimeout(this.expiryTimer)
    this.onFinish(this, reason)
  }
}
