/** A stream the coalescer hands this turn's frames to, as one Buffer. */
export interface TurnTarget {
  send: (joined: Buffer) => void
}

/** The frames of the multi-frame stream flushed last in this flush, and the Buffer they were joined into. */
interface LastJoin {
  frames: readonly Buffer[]
  joined: Buffer
}

const NOTHING = Buffer.alloc(0)

/**
 * One stream's frames queued in this turn, owned by its coalescer: the stream pushes each frame
 * here and is handed them once, joined, at the end of the turn (or takes them with its end).
 */
export class TurnQueue {
  private readonly frames: Buffer[] = []
  private queuedBytes = 0

  constructor (private readonly coalescer: WriteCoalescer, private readonly target: TurnTarget) {}

  /** Bytes queued this turn, not yet handed to the stream. */
  get bytes (): number {
    return this.queuedBytes
  }

  push (frame: Buffer): void {
    if (this.frames.length === 0) this.coalescer.mark(this)
    this.frames.push(frame)
    this.queuedBytes += frame.length
  }

  /** The frames queued this turn as one Buffer, taken out of the queue (undefined: none). */
  take (): Buffer | undefined {
    const { frames } = this
    if (frames.length === 0) return undefined
    const joined = frames.length === 1 ? frames[0] : Buffer.concat(frames, this.queuedBytes)
    this.clear()
    return joined
  }

  /** Lets go of what is queued: the stream is over. */
  clear (): void {
    this.frames.length = 0
    this.queuedBytes = 0
  }

  /**
   * Hands the turn's frames to the stream as one Buffer. Streams flushed one after another with
   * the same frames (every stream of a broadcast burst, topics permitting) share one Buffer as
   * they share each frame: one copy per burst instead of one per stream, whose allocation and
   * copy were a quarter of the CPU of bursts of 50 at 10,000 streams.
   */
  hand (last: LastJoin): void {
    const { frames } = this
    // Ended within the turn: its end took the frames, or let them go.
    if (frames.length === 0) return
    let joined = frames[0]
    if (frames.length > 1) {
      if (!sameFrames(frames, last.frames)) {
        last.frames = frames.slice()
        last.joined = Buffer.concat(frames, this.queuedBytes)
      }
      joined = last.joined
    }
    // Cleared first: a frame the write itself causes is queued for the next turn.
    this.clear()
    this.target.send(joined)
  }
}

/**
 * Joins the writes a stream gets within one turn of the event loop into one socket write: a
 * stream's queue marks itself here with its first frame of the turn, and one `setImmediate` per
 * turn (for every stream of the registry, not one per stream) hands every marked stream its frames.
 *
 * Why `setImmediate`, not `process.nextTick` or `queueMicrotask`: real bursts arrive as separate
 * callbacks — 50 POST /api/notify requests parsed in one poll phase, or bus messages — and Node
 * runs the nextTick and microtask queues after *each* callback, so a flush scheduled there would
 * write once per event. The check phase runs once after the whole poll phase, so it catches the
 * burst either way. It is not a timer: a lone event is still written in the turn it was broadcast
 * in, before the loop can wait for I/O again (poll does not block while an immediate is pending).
 * One broadcast from a setImmediate callback itself is written in the next check phase, one
 * non-blocking iteration on.
 */
export class WriteCoalescer {
  private marked: TurnQueue[] = []

  /** A queue for `target`'s frames, flushed by this coalescer. */
  queueFor (target: TurnTarget): TurnQueue {
    return new TurnQueue(this, target)
  }

  /** Flushes `queue` at the end of this turn; its first frame of the turn calls this, once. */
  mark (queue: TurnQueue): void {
    if (this.marked.length === 0) setImmediate(this.flushMarked)
    this.marked.push(queue)
  }

  private readonly flushMarked = (): void => {
    // A write during the flush marks into a fresh list and schedules the next turn's flush.
    const queues = this.marked
    this.marked = []
    const last: LastJoin = { frames: [], joined: NOTHING }
    for (const queue of queues) queue.hand(last)
  }
}

function sameFrames (a: readonly Buffer[], b: readonly Buffer[]): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}
