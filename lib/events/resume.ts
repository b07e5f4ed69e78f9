import type { Bus, BusEvent, BusRead } from '../bus/bus'
import { SingleFlight } from '../shared/single-flight'
import { comparePositions, formatEventId, type EventPosition } from '../bus/event-id'
import type { History, HistoryEntry } from './history'
import type { StreamStats } from '../observe/stats'
import type { TopicGrant } from './topic'

/** A client whose replay is not written yet, or who is ahead of this instance. */
type Replay = { kind: 'entries', entries: HistoryEntry[] } | Extract<BusRead, { kind: 'gone' | 'behind' }>

interface Pending {
  /** The newest position the client has: live events up to it are not written again. */
  after: EventPosition
  /** Live events held while the replay is read (null: not waiting, only skipping up to `after`). */
  held: HistoryEntry[] | null
  /**
   * The resume starts again later (the bus was down, or this instance is behind the client's
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
  /** The frame of a bus event as every client gets it (encoded once per instance). */
  frameOf (event: BusEvent): HistoryEntry
  /** `event: resync` with the newest id `client` is entitled to, for a client whose gap cannot be filled. */
  resyncFrame (reason: string, client: ResumingStream): Buffer
}

/** A failed bus read is tried again this long later (± half), while the client stays connected. */
const RETRY_READ_MS = 1000

/**
 * Resuming from Last-Event-ID: from the local ring when it covers the gap, else one shared bus
 * read per range. While a read is under way the client's live events are held, then written
 * after the replay, so none overtakes or duplicates a replayed one (mercure's localsubscriber).
 */
export class Resumes {
  private readonly pending = new Map<ResumingStream, Pending>()
  private readonly flights = new SingleFlight<Replay>()
  private readonly retries = new Set<NodeJS.Timeout>()

  /** `stats` counts how each resume ended (a client that leaves while its read is under way is not counted). */
  constructor (private readonly host: ResumeHost, private readonly stats: Pick<StreamStats, 'resumed'>, private readonly random: () => number) {}

  /** Whether any client needs intercept() at all (the fan-out loop skips the lookup otherwise). */
  get active (): boolean {
    return this.pending.size !== 0
  }

  /** In the fan-out: true when `entry` must not be written to `client` now (held, or it has it). */
  intercept (client: ResumingStream, entry: HistoryEntry): boolean {
    const pending = this.pending.get(client)
    if (pending === undefined) return false
    if (pending.retrying) return true
    if (pending.held !== null) {
      pending.held.push(entry)
      return true
    }
    if (entry.position.epoch === pending.after.epoch && comparePositions(entry.position, pending.after) <= 0) return true
    this.pending.delete(client)
    return false
  }

  forget (client: ResumingStream): void {
    this.pending.delete(client)
  }

  /**
   * Whether a discontinuity at `at` leaves `client` with nothing lost: its resume starts again
   * from its own id anyway, or it is at or past `at` in that epoch (it has every event up to it).
   */
  survives (client: ResumingStream, at: EventPosition): boolean {
    const pending = this.pending.get(client)
    if (pending === undefined) return false
    return pending.retrying || (pending.held === null && pending.after.epoch === at.epoch && comparePositions(pending.after, at) >= 0)
  }

  /** Resumes `client` from `from`; whatever is pending for it is let go when its stream ends. */
  start (client: ResumingStream, from: EventPosition): void {
    client.whenOver(() => this.pending.delete(client))
    this.begin(client, from)
  }

  private begin (client: ResumingStream, from: EventPosition): void {
    const local = this.host.history.since(from)
    if (local.kind === 'replay') {
      if (this.resyncIfTooLarge(client, local.entries)) return
      this.stats.resumed('replayed', writeAll(client, local.entries))
      return
    }
    if (!this.host.bus.shared) {
      // One process: the ring is the whole history.
      this.stats.resumed('resync', 0)
      client.write(this.host.resyncFrame(local.kind === 'miss' ? local.reason : 'unknown', client))
      return
    }
    if (local.kind === 'ahead') {
      // It has seen events this instance has not delivered yet: skip them when they come.
      this.stats.resumed('replayed', 0)
      this.pending.set(client, { after: from, held: null, retrying: false })
      return
    }
    const last = this.host.lastPosition()
    const upTo = last !== null && last.epoch === from.epoch && comparePositions(last, from) > 0 ? last : from
    this.pending.set(client, { after: from, held: [], retrying: false })
    this.await(client, from, upTo)
  }

  private await (client: ResumingStream, from: EventPosition, upTo: EventPosition): void {
    // Keyed by the whole range: a client joining later shares the read only if nothing new was
    // delivered since. The frames are encoded once per read, not once per client.
    this.flights.run(`${formatEventId(from)}>${formatEventId(upTo)}`, async () => {
      const read = await this.host.bus.read(from, upTo)
      if (read.kind !== 'events') return read
      const entries = read.events.map((event) => this.host.frameOf(event))
      this.host.history.extendBack(from, entries)
      return { kind: 'entries', entries } as const
    }).then(
      (read) => this.finish(client, from, upTo, read),
      // The bus is down: the stream stays open (heartbeats go on) and the resume is tried again.
      () => this.retry(client, from)
    )
  }

  /**
   * Starts the resume again later, from the client's own id: from the ring if this instance has
   * caught up by then, else from the bus. Meanwhile the client is sent nothing, so no event of an
   * epoch it has moved past reaches it, and none is written twice.
   */
  private retry (client: ResumingStream, from: EventPosition): void {
    const pending = this.pending.get(client)
    if (pending === undefined) return
    pending.retrying = true
    pending.held = null
    const timer = setTimeout(() => {
      this.retries.delete(timer)
      if (this.pending.get(client) !== pending) return
      this.pending.delete(client)
      this.begin(client, from)
    }, RETRY_READ_MS * (0.5 + this.random()))
    timer.unref()
    this.retries.add(timer)
  }

  private finish (client: ResumingStream, from: EventPosition, upTo: EventPosition, read: Replay): void {
    const pending = this.pending.get(client)
    // Gone meanwhile (remove() forgot it), or already finished by an earlier read.
    if (pending === undefined || pending.retrying) return
    if (read.kind === 'behind') {
      // A resync from here would carry an id older than the client's: it waits for this instance.
      this.retry(client, from)
      return
    }
    this.pending.delete(client)
    if (read.kind === 'gone') {
      // Too far behind, or not one of our ids: say so, rather than leave a silent gap. The resync
      // carries the newest id it is entitled to, which covers what was held, so the next
      // reconnect resumes from now.
      this.stats.resumed('resync', 0)
      client.write(this.host.resyncFrame(read.reason, client))
      return
    }
    if (this.resyncIfTooLarge(client, read.entries)) return
    let after = from
    let replayed = 0
    for (const entry of read.entries) {
      if (client.wants(entry.topic)) {
        if (!client.write(entry.frame)) {
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
      if (newer && client.wants(entry.topic) && !client.write(entry.frame)) return
    }
  }

  /**
   * A replay larger than the client's unsent-bytes budget would get it dropped as slow, and its
   * reconnect would ask for the same replay again, forever: it gets a resync instead.
   */
  private resyncIfTooLarge (client: ResumingStream, entries: readonly HistoryEntry[]): boolean {
    let bytes = 0
    for (const entry of entries) if (client.wants(entry.topic)) bytes += entry.frame.length
    if (client.fits(bytes)) return false
    this.stats.resumed('resync', 0)
    client.write(this.host.resyncFrame('too-old', client))
    return true
  }

  close (): void {
    for (const timer of this.retries) clearTimeout(timer)
    this.retries.clear()
    this.pending.clear()
  }
}

/** Writes what the client wants of `entries`; returns how many (it stops where the client was dropped). */
function writeAll (client: ResumingStream, entries: readonly HistoryEntry[]): number {
  let written = 0
  for (const entry of entries) {
    if (!client.wants(entry.topic)) continue
    if (!client.write(entry.frame)) break
    written++
  }
  return written
}
