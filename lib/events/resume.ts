import type { Bus, BusEvent, BusRead } from '../bus/bus'
import { SingleFlight } from '../shared/single-flight'
import { comparePositions, formatEventId, type EventPosition } from '../bus/event-id'
import type { History, HistoryEntry } from './history'
import type { StreamStats } from '../observe/stats'
import type { TopicGrant } from './topic'

/** A stream whose replay is not written yet, or who is ahead of this instance. */
type Replay = { kind: 'entries', entries: HistoryEntry[] } | Extract<BusRead, { kind: 'gone' | 'behind' }>

interface Pending {
  /** The newest position the stream has: live events up to it are not written again. */
  after: EventPosition
  /** Live events held while the replay is read (null: not waiting, only skipping up to `after`). */
  held: HistoryEntry[] | null
  /**
   * The resume starts again later (the bus was down, or this instance is behind the stream's
   * epoch): live events meanwhile are left to the ring and the bus, which the new start reads.
   */
  retrying: boolean
}

/** What a resume needs of a stream: whether it wants an event, whether a replay fits its budget, a write, its end. */
export interface ResumingStream {
  readonly grant: TopicGrant
  wants (topic: string | undefined): boolean
  fits (bytes: number): boolean
  write (frame: Buffer): boolean
  whenOver (fn: () => void): void
}

/** What the registry lends the resume logic. */
export interface ResumeHost {
  readonly history: History
  readonly bus: Bus
  /** The newest position delivered here, or null before the first. */
  lastPosition (): EventPosition | null
  /** The frame of a bus event as every stream gets it (encoded once per instance). */
  frameOf (event: BusEvent): HistoryEntry
  /** `event: resync` with the newest id `stream` is entitled to, for a stream whose gap cannot be filled. */
  resyncFrame (reason: string, stream: ResumingStream): Buffer
}

/** A failed bus read is tried again this long later (± half), while the stream stays connected. */
const RETRY_READ_MS = 1000

/**
 * Resuming from Last-Event-ID: from the local ring when it covers the gap, else one shared bus
 * read per range. While a read is under way the stream's live events are held, then written
 * after the replay, so none overtakes or duplicates a replayed one (mercure's localsubscriber).
 */
export class Resumes {
  private readonly pending = new Map<ResumingStream, Pending>()
  private readonly flights = new SingleFlight<Replay>()
  /** Whether the bus holds an id: one question per id, however many streams ask it at once. */
  private readonly checks = new SingleFlight<BusRead>()
  private readonly retries = new Set<NodeJS.Timeout>()
  /** Streams whose id past this instance's newest the bus has not vouched for yet. */
  private readonly verifying = new Set<ResumingStream>()

  /** `stats` counts how each resume ended (a stream that leaves while its read is under way is not counted). */
  constructor (private readonly host: ResumeHost, private readonly stats: Pick<StreamStats, 'resumed'>, private readonly random: () => number) {}

  /** Whether any stream needs intercept() at all (the fan-out loop skips the lookup otherwise). */
  get active (): boolean {
    return this.pending.size !== 0
  }

  /** In the fan-out: true when `entry` must not be written to `stream` now (held, or it has it). */
  intercept (stream: ResumingStream, entry: HistoryEntry): boolean {
    const pending = this.pending.get(stream)
    if (pending === undefined) return false
    if (pending.retrying) return true
    if (pending.held !== null) {
      pending.held.push(entry)
      return true
    }
    if (entry.position.epoch === pending.after.epoch && comparePositions(entry.position, pending.after) <= 0) return true
    this.pending.delete(stream)
    return false
  }

  forget (stream: ResumingStream): void {
    this.pending.delete(stream)
  }

  /**
   * Whether a discontinuity at `at` leaves `stream` with nothing lost: its resume starts again
   * from its own id anyway, or it is at or past `at` in that epoch (it has every event up to it).
   */
  survives (stream: ResumingStream, at: EventPosition): boolean {
    const pending = this.pending.get(stream)
    if (pending === undefined) return false
    return pending.retrying || (pending.held === null && pending.after.epoch === at.epoch && comparePositions(pending.after, at) >= 0)
  }

  /** Resumes `stream` from `from`; whatever is pending for it is let go when its stream ends. */
  start (stream: ResumingStream, from: EventPosition): void {
    stream.whenOver(() => {
      this.pending.delete(stream)
      this.verifying.delete(stream)
    })
    this.begin(stream, from)
  }

  private begin (stream: ResumingStream, from: EventPosition): void {
    const local = this.host.history.since(from)
    if (local.kind === 'replay') {
      if (this.resyncIfTooLarge(stream, local.entries)) return
      this.stats.resumed('replayed', writeAll(stream, local.entries))
      return
    }
    if (!this.host.bus.shared) {
      // One process: the ring is the whole history.
      this.stats.resumed('resync', 0)
      stream.write(this.host.resyncFrame(local.kind === 'miss' ? local.reason : 'unknown', stream))
      return
    }
    if (local.kind === 'ahead') {
      // It has seen events this instance has not delivered yet — or claims to: they are skipped as
      // they come, while the bus says whether it holds that id at all.
      this.pending.set(stream, { after: from, held: null, retrying: false })
      this.verifyAhead(stream, from)
      return
    }
    const last = this.host.lastPosition()
    const upTo = last !== null && last.epoch === from.epoch && comparePositions(last, from) > 0 ? last : from
    this.pending.set(stream, { after: from, held: [], retrying: false })
    this.await(stream, from, upTo)
  }

  private await (stream: ResumingStream, from: EventPosition, upTo: EventPosition): void {
    // Keyed by the whole range: a stream joining later shares the read only if nothing new was
    // delivered since. The frames are encoded once per read, not once per stream.
    this.flights.run(`${formatEventId(from)}>${formatEventId(upTo)}`, async () => {
      const read = await this.host.bus.read(from, upTo)
      if (read.kind !== 'events') return read
      const entries = read.events.map((event) => this.host.frameOf(event))
      this.host.history.extendBack(from, entries)
      return { kind: 'entries', entries } as const
    }).then(
      (read) => this.finish(stream, from, upTo, read),
      // The bus is down: the stream stays open (heartbeats go on) and the resume is tried again.
      () => this.retry(stream, from)
    )
  }

  /**
   * An id past what this instance has delivered is another instance's newest, or one the bus never
   * issued (forged, from the future): a stream that kept skipping up to it would be muted. Until the
   * bus answers, events up to it are skipped; an id the bus does not hold then gets a resync — even
   * if newer events already reached the stream, since the ones skipped before them are unaccounted.
   */
  private verifyAhead (stream: ResumingStream, from: EventPosition): void {
    this.verifying.add(stream)
    this.checks.run(formatEventId(from), () => this.host.bus.read(from, from)).then((read) => {
      if (!this.verifying.delete(stream)) return
      if (read.kind !== 'gone') {
        this.stats.resumed('replayed', 0)
        return
      }
      this.pending.delete(stream)
      this.stats.resumed('resync', 0)
      stream.write(this.host.resyncFrame(read.reason, stream))
    }, () => {
      if (!this.verifying.delete(stream)) return
      // The bus is down: nothing proves the id either way. The resume starts again later — or, if
      // newer events already reached the stream past what it skipped, a resync now.
      if (this.pending.has(stream)) {
        this.retry(stream, from)
        return
      }
      this.stats.resumed('resync', 0)
      stream.write(this.host.resyncFrame('unknown', stream))
    })
  }

  /**
   * Starts the resume again later, from the stream's own id: from the ring if this instance has
   * caught up by then, else from the bus. Meanwhile the stream is sent nothing, so no event of an
   * epoch it has moved past reaches it, and none is written twice.
   */
  private retry (stream: ResumingStream, from: EventPosition): void {
    const pending = this.pending.get(stream)
    if (pending === undefined) return
    pending.retrying = true
    pending.held = null
    const timer = setTimeout(() => {
      this.retries.delete(timer)
      if (this.pending.get(stream) !== pending) return
      this.pending.delete(stream)
      this.begin(stream, from)
    }, RETRY_READ_MS * (0.5 + this.random()))
    timer.unref()
    this.retries.add(timer)
  }

  private finish (stream: ResumingStream, from: EventPosition, upTo: EventPosition, read: Replay): void {
    const pending = this.pending.get(stream)
    // Gone meanwhile (remove() forgot it), or already finished by an earlier read.
    if (pending === undefined || pending.retrying) return
    if (read.kind === 'behind') {
      // A resync from here would carry an id older than the stream's: it waits for this instance.
      this.retry(stream, from)
      return
    }
    this.pending.delete(stream)
    if (read.kind === 'gone') {
      // Too far behind, or not one of our ids: say so, rather than leave a silent gap. The resync
      // carries the newest id it is entitled to, which covers what was held, so the next
      // reconnect resumes from now.
      this.stats.resumed('resync', 0)
      stream.write(this.host.resyncFrame(read.reason, stream))
      return
    }
    if (this.resyncIfTooLarge(stream, read.entries)) return
    let after = from
    let replayed = 0
    for (const entry of read.entries) {
      if (stream.wants(entry.topic)) {
        if (!stream.write(entry.frame)) {
          this.stats.resumed('replayed', replayed)
          return
        }
        replayed++
      }
      after = entry.position
    }
    this.stats.resumed('replayed', replayed)
    if (comparePositions(upTo, after) > 0) after = upTo
    for (const entry of pending.held ?? []) {
      const newer = entry.position.epoch !== after.epoch || comparePositions(entry.position, after) > 0
      if (newer && stream.wants(entry.topic) && !stream.write(entry.frame)) return
    }
  }

  /**
   * A replay larger than the stream's unsent-bytes budget would get it dropped as slow, and its
   * reconnect would ask for the same replay again, forever: it gets a resync instead.
   */
  private resyncIfTooLarge (stream: ResumingStream, entries: readonly HistoryEntry[]): boolean {
    let bytes = 0
    for (const entry of entries) if (stream.wants(entry.topic)) bytes += entry.frame.length
    if (stream.fits(bytes)) return false
    this.stats.resumed('resync', 0)
    stream.write(this.host.resyncFrame('too-old', stream))
    return true
  }

  close (): void {
    for (const timer of this.retries) clearTimeout(timer)
    this.retries.clear()
    this.pending.clear()
    this.verifying.clear()
  }
}

/** Writes what the stream wants of `entries`; returns how many (it stops where the stream was dropped). */
function writeAll (stream: ResumingStream, entries: readonly HistoryEntry[]): number {
  let written = 0
  for (const entry of entries) {
    if (!stream.wants(entry.topic)) continue
    if (!stream.write(entry.frame)) break
    written++
  }
  return written
}
