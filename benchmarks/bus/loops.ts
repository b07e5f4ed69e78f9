/**
 * The two ways an instance of the bus benchmark publishes, apart from any server so that the
 * tests can drive them with a fake publish: the capacity phase's closed loop, gated on what the
 * streams have not taken yet, and the latency phase's open loop, publishes scheduled at a fixed
 * rate and timed from their scheduled time.
 */
import { Histogram } from '../lib/histogram'

/** One publish; resolves once it settled (published), rejects with a coded error otherwise. */
export type Publish = (seq: number) => Promise<unknown>

/** Counts of a loop so far: settled published, failed (by error code), and the most in flight at once. */
export interface LoopCounts {
  sent: number
  settled: number
  failed: number
  errors: Record<string, number>
  maxInFlight: number
}

function emptyCounts (): LoopCounts {
  return { sent: 0, settled: 0, failed: 0, errors: {}, maxInFlight: 0 }
}

function countFailure (counts: LoopCounts, error: unknown): void {
  counts.failed++
  const code = (error as { code?: string } | null)?.code ?? (error instanceof Error ? error.message : String(error))
  counts.errors[code] = (counts.errors[code] ?? 0) + 1
}

export interface ClosedLoopOptions {
  /** Publishes kept in flight, and the most sent in one turn of the event loop. */
  inFlight: number
  /** Unsent bytes on the streams' sockets now; above `backlogLimit` nothing more is sent until they drain. */
  backlog: () => number
  backlogLimit: number
  /** The loop stops itself after this many ms or this many publishes, whichever comes first. */
  maxMs: number
  maxPublishes: number
  /** ms, monotonic (performance.now in the instance). */
  now: () => number
}

/** How often a loop held back by the streams' backlog looks again. */
const BACKLOG_POLL_MS = 1

/**
 * The capacity loop: `inFlight` publishes kept going, the next sent as one settles, at most
 * `inFlight` sent in one turn (the memory bus settles within the call, so the loop would otherwise
 * never let the turn end and the frames be written), and none while the streams hold more than
 * `backlogLimit` unsent bytes. It publishes as fast as the streams take what it delivers. The turn's
 * end is a setImmediate scheduled after the turn's first publish, so the frames that publish queued
 * are written (the plugin flushes in a setImmediate of its own) before the next turn's publishes.
 * Nothing spins while it waits for Redis: a turn with no publish schedules nothing.
 */
export class ClosedLoop {
  readonly counts = emptyCounts()
  private inFlight = 0
  private sentThisTurn = 0
  private gated = false
  private stopped = false
  private readonly deadline: number
  private idle: (() => void) | null = null

  constructor (private readonly publish: Publish, private readonly options: ClosedLoopOptions) {
    this.deadline = options.now() + options.maxMs
  }

  start (): void {
    this.topUp()
  }

  /** Sends nothing more; resolves once every publish in flight has settled (or after `graceMs`). */
  async stop (graceMs: number): Promise<LoopCounts> {
    this.stopped = true
    if (this.inFlight > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, graceMs)
        this.idle = () => { clearTimeout(timer); resolve() }
      })
    }
    return this.counts
  }

  private done (): boolean {
    return this.stopped || this.counts.sent >= this.options.maxPublishes || this.options.now() >= this.deadline
  }

  private topUp (): void {
    while (!this.gated && this.inFlight < this.options.inFlight && this.sentThisTurn < this.options.inFlight && !this.done()) this.send()
  }

  private send (): void {
    const seq = ++this.counts.sent
    this.inFlight++
    if (this.inFlight > this.counts.maxInFlight) this.counts.maxInFlight = this.inFlight
    this.publish(seq).then(() => { this.counts.settled++ }, (error: unknown) => countFailure(this.counts, error)).finally(this.settled)
    // After the publish: its frames' flush (the plugin's setImmediate) runs before this turn's end.
    if (this.sentThisTurn++ === 0) setImmediate(this.endTurn)
  }

  private readonly settled = (): void => {
    this.inFlight--
    if (this.inFlight === 0 && this.idle !== null) this.idle()
    this.topUp()
  }

  private readonly endTurn = (): void => {
    this.sentThisTurn = 0
    if (this.done()) return
    this.gated = this.options.backlog() > this.options.backlogLimit
    if (this.gated) setTimeout(this.endTurn, BACKLOG_POLL_MS)
    else this.topUp()
  }
}

/** How many of `total` publishes scheduled every 1000/perSec ms from `startMs` are due at `nowMs`. */
export function dueBy (startMs: number, perSec: number, nowMs: number, total: number): number {
  if (nowMs < startMs) return 0
  return Math.min(total, Math.floor((nowMs - startMs) * perSec / 1000) + 1)
}

/** When publish `index` (from 0) of a schedule at `perSec` from `startMs` is due. */
export function scheduledAt (startMs: number, perSec: number, index: number): number {
  return startMs + index * 1000 / perSec
}

export interface OpenLoopOptions {
  perSec: number
  /** Publishes scheduled in the first `warmupMs` are not timed. */
  warmupMs: number
  measureMs: number
  now: () => number
  /** After the last scheduled publish: the longest wait for those in flight to settle. */
  settleMs: number
  /** CPU time of this process so far (µs, user + system); read at both ends of the measured part. */
  cpuUs: () => number
}

export interface OpenLoopResult extends LoopCounts {
  /** Publishes the schedule held (warm-up included), and those of the measured part. */
  scheduled: number
  measured: number
  /** Measured publishes that settled published: latency = scheduled time → settled, in µs. */
  latencyUs: ReturnType<Histogram['toJSON']>
  /** The measured part: from its first scheduled publish to its last, and this process's CPU over it. */
  windowMs: number
  cpuUs: number
  /** Publishes sent more than 1 ms after their scheduled time (the timer, or a busy loop). */
  sentLate: number
}

/**
 * The latency loop: publishes scheduled at `perSec` for warmupMs + measureMs, each sent at its
 * scheduled time whatever is still in flight (an open loop: nothing waits for an earlier publish),
 * and timed from that scheduled time, so a send that comes late because the loop was busy, and
 * the queueing behind it, count in its latency. Bounded: the schedule has a fixed count and ends.
 */
export function openLoop (publish: Publish, options: OpenLoopOptions): Promise<OpenLoopResult> {
  const { perSec, warmupMs, measureMs, now } = options
  const counts = emptyCounts()
  const total = Math.max(1, Math.round(perSec * (warmupMs + measureMs) / 1000))
  const start = now() + 1
  const firstMeasured = Math.min(total, Math.ceil(warmupMs * perSec / 1000))
  const latency = new Histogram()
  let inFlight = 0
  let index = 0
  let sentLate = 0
  let cpuAtStart: number | null = null
  let cpuAtEnd = 0
  let measuredEnd = start
  return new Promise((resolve) => {
    let finished = false
    let settleTimer: NodeJS.Timeout | undefined
    const finish = (): void => {
      if (finished) return
      finished = true
      clearTimeout(settleTimer)
      const measuredStart = scheduledAt(start, perSec, firstMeasured)
      resolve({
        ...counts,
        scheduled: total,
        measured: total - firstMeasured,
        latencyUs: latency.toJSON(),
        windowMs: Math.max(0, measuredEnd - measuredStart),
        cpuUs: cpuAtEnd - (cpuAtStart ?? cpuAtEnd),
        sentLate
      })
    }
    const send = (i: number): void => {
      const at = scheduledAt(start, perSec, i)
      if (i === firstMeasured) cpuAtStart = options.cpuUs()
      if (now() - at > 1) sentLate++
      counts.sent++
      inFlight++
      if (inFlight > counts.maxInFlight) counts.maxInFlight = inFlight
      publish(i + 1).then(() => {
        counts.settled++
        if (i >= firstMeasured) latency.record(Math.max(0, (now() - at) * 1000))
      }, (error: unknown) => countFailure(counts, error)).finally(() => {
        inFlight--
        if (inFlight === 0 && index === total) finish()
      })
    }
    const tick = (): void => {
      const due = dueBy(start, perSec, now(), total)
      while (index < due) send(index++)
      if (index < total) {
        setTimeout(tick, Math.max(0, scheduledAt(start, perSec, index) - now()))
        return
      }
      measuredEnd = scheduledAt(start, perSec, total - 1)
      cpuAtEnd = options.cpuUs()
      if (inFlight === 0) finish()
      else settleTimer = setTimeout(finish, options.settleMs)
    }
    setTimeout(tick, 1)
  })
}

/**
 * Counts SSE frames (each ends with a blank line, "\n\n") in a stream's bytes as they arrive,
 * chunk by chunk: a frame's end split across two reads is counted once. HTTP's own "\r\n" never
 * makes "\n\n", and the benchmark's event data holds no newline.
 */
export class FrameCounter {
  frames = 0
  bytes = 0
  /** The last chunk ended with a "\n" that no counted "\n\n" took. */
  private pendingNewline = false

  /** The first `length` bytes of `buffer` arrived (a socket's onread hands one shared buffer). */
  add (buffer: Buffer, length = buffer.length): void {
    if (length === 0) return
    const chunk = length === buffer.length ? buffer : buffer.subarray(0, length)
    this.bytes += length
    let from = 0
    let pairEnd = -1
    if (this.pendingNewline && chunk[0] === 0x0a) {
      this.frames++
      from = 1
      pairEnd = 0
    }
    for (let at = chunk.indexOf('\n\n', from); at !== -1; at = chunk.indexOf('\n\n', at + 2)) {
      this.frames++
      pairEnd = at + 1
    }
    const last = chunk.length - 1
    this.pendingNewline = chunk[last] === 0x0a && pairEnd !== last
  }
}
