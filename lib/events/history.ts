import { comparePositions, type EventPosition } from '../bus/event-id'

/** One event as history keeps it: the frame every client was sent, shared, not copied. */
export interface HistoryEntry {
  readonly position: EventPosition
  readonly frame: Buffer
  readonly topic: string | undefined
}

export type ReplayResult =
  | { kind: 'replay', entries: HistoryEntry[] }
  /** Newer than anything delivered here yet (another instance may be ahead of this one). */
  | { kind: 'ahead' }
  /** Not covered by this ring: older than what it holds, or not an id it knows. */
  | { kind: 'miss', reason: 'too-old' | 'unknown' }

/**
 * The local replay ring for Last-Event-ID: the newest events delivered here, at most `maxEvents`
 * of them and at most `maxBytes` of frames (the newest is kept even if alone it is larger). It
 * holds every event after `floor`; positions are compared, never subtracted.
 */
export class History {
  /** Evicted slots before `head` are cleared so their frames can be collected. */
  private entries: Array<HistoryEntry | undefined> = []
  private head = 0
  private bytes = 0

  /**
   * @param floor the position after which every event will pass through push() (null: unknown,
   * every resume misses until the first push).
   */
  constructor (private readonly maxEvents: number, private readonly maxBytes: number, private floor: EventPosition | null) {}

  get size (): number {
    return this.entries.length - this.head
  }

  get byteLength (): number {
    return this.bytes
  }

  push (entry: HistoryEntry): void {
    if (this.floor === null || this.floor.epoch !== entry.position.epoch) {
      // A new epoch: what the ring held belongs to a history that is gone.
      this.entries = []
      this.head = 0
      this.bytes = 0
      this.floor = { epoch: entry.position.epoch, major: 0, minor: null }
    }
    if (this.maxEvents === 0) {
      this.floor = entry.position
      return
    }
    this.entries.push(entry)
    this.bytes += entry.frame.length
    while (this.size > this.maxEvents || (this.bytes > this.maxBytes && this.size > 1)) {
      const evicted = this.entries[this.head] as HistoryEntry
      this.bytes -= evicted.frame.length
      this.floor = evicted.position
      this.entries[this.head++] = undefined
    }
    // Compact now and then so the array does not grow with every broadcast ever made.
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head)
      this.head = 0
    }
  }

  /**
   * Takes in older events read from the bus for a resume, `entries` being every event after `from`
   * up to at least the floor: the ring then covers `from` too, so the next resumes of a reconnect
   * wave are served here. Only when they fit the bounds; the ring never drops newer events for them.
   */
  extendBack (from: EventPosition, entries: readonly HistoryEntry[]): void {
    const floor = this.floor
    if (floor === null || floor.epoch !== from.epoch || comparePositions(from, floor) >= 0) return
    const upToFloor = entries.findIndex((entry) => comparePositions(entry.position, floor) === 0)
    if (upToFloor === -1) return
    const older = entries.slice(0, upToFloor + 1)
    const bytes = older.reduce((sum, entry) => sum + entry.frame.length, 0)
    if (this.size + older.length > this.maxEvents || this.bytes + bytes > this.maxBytes) return
    this.entries = [...older, ...this.entries.slice(this.head)]
    this.head = 0
    this.bytes += bytes
    this.floor = from
  }

  /** The newest held event whose topic `wants` accepts (undefined: none). */
  newest (wants: (topic: string | undefined) => boolean): HistoryEntry | undefined {
    for (let i = this.entries.length - 1; i >= this.head; i--) {
      const entry = this.entries[i] as HistoryEntry
      if (wants(entry.topic)) return entry
    }
    return undefined
  }

  /** Every held event after `from`, oldest first, or why the ring cannot say. */
  since (from: EventPosition): ReplayResult {
    const floor = this.floor
    if (floor === null || floor.epoch !== from.epoch) return { kind: 'miss', reason: 'unknown' }
    const newest = this.size === 0 ? floor : (this.entries[this.entries.length - 1] as HistoryEntry).position
    if (comparePositions(from, newest) > 0) return { kind: 'ahead' }
    const atFloor = comparePositions(from, floor)
    if (atFloor < 0) return { kind: 'miss', reason: 'too-old' }
    if (atFloor === 0) return { kind: 'replay', entries: this.entries.slice(this.head) as HistoryEntry[] }
    // Binary search: positions in the ring are increasing.
    let lo = this.head
    let hi = this.entries.length - 1
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1
      const order = comparePositions((this.entries[mid] as HistoryEntry).position, from)
      if (order === 0) return { kind: 'replay', entries: this.entries.slice(mid + 1) as HistoryEntry[] }
      if (order < 0) lo = mid + 1
      else hi = mid - 1
    }
    return { kind: 'miss', reason: 'unknown' }
  }
}
