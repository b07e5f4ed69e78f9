/** A stream that queues its writes and hands them to its socket when told to. */
export interface Flushable {
  flush: () => void
}

/**
 * Joins the writes a stream gets within one turn of the event loop into one socket write: a
 * stream that queues its first frame of the turn marks itself here, and one `setImmediate` per
 * turn (for every stream of the registry, not one per stream) flushes every marked stream.
 *
 * Why `setImmediate`, not `process.nextTick` or `queueMicrotask`: real bursts arrive as separate
 * callbacks — 50 POST /api/notify requests parsed in one poll phase, or bus messages — and Node
 * runs the nextTick and microtask queues after *each* callback, so a flush scheduled there would
 * write once per event (node:http already corks each response until the next tick, which is why
 * a burst broadcast from one synchronous loop was one write per stream even before). The check
 * phase runs once after the whole poll phase, so it catches the burst either way. It is not a
 * timer: a lone event is still written in the turn it was broadcast in, before the loop can wait
 * for I/O again (poll does not block while an immediate is pending).
 */
export class TurnFlush {
  private marked: Flushable[] = []

  /** Flushes `stream` at the end of this turn; call once per turn, with its first queued frame. */
  mark (stream: Flushable): void {
    if (this.marked.length === 0) setImmediate(this.flushMarked)
    this.marked.push(stream)
  }

  private readonly flushMarked = (): void => {
    // A write during a flush marks into a fresh list and schedules the next turn's flush.
    const streams = this.marked
    this.marked = []
    for (const stream of streams) stream.flush()
  }
}
