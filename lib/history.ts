/** One broadcast as history keeps it: the frame every client was sent, shared, not copied. */
export interface HistoryEntry {
  readonly seq: number
  readonly frame: Buffer
  readonly topic: string | undefined
}

export type ReplayResult =
  | { kind: 'replay', entries: HistoryEntry[] }
  | { kind: 'resync', reason: 'too-old' | 'unknown' }

/**
 * The bounded replay buffer for Last-Event-ID: the newest broadcasts, at most `maxEvents` of
 * them and at most `maxBytes` of frames (the newest is kept even if alone it is larger).
 * Sequence numbers are contiguous, so finding where a client left off is arithmetic, not a scan.
 */
export class History {
  /** Evicted slots before `head` are cleared so their frames can be collected. */
  private entries: Array<HistoryEntry | undefined> = []
  private head = 0
  private bytes = 0
  /** The seq of the newest broadcast ever made (0: none yet). */
  lastSeq = 0

  constructor (private readonly maxEvents: number, private readonly maxBytes: number) {}

  get size (): number {
    return this.entries.length - this.head
  }

  /** The seq the next broadcast will get (its id is encoded before it is pushed). */
  get nextSeq (): number {
    return this.lastSeq + 1
  }

  get byteLength (): number {
    return this.bytes
  }

  push (frame: Buffer, topic: string | undefined): HistoryEntry {
    const entry = { seq: ++this.lastSeq, frame, topic }
    if (this.maxEvents === 0) return entry
    this.entries.push(entry)
    this.bytes += frame.length
    while (this.size > this.maxEvents || (this.bytes > this.maxBytes && this.size > 1)) {
      this.bytes -= (this.entries[this.head] as HistoryEntry).frame.length
      this.entries[this.head++] = undefined
    }
    // Compact now and then so the array does not grow with every broadcast ever made.
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head)
      this.head = 0
    }
    return entry
  }

  /** Every held event after `seq`, oldest first, or why the client must resync instead. */
  since (seq: number): ReplayResult {
    if (seq > this.lastSeq) return { kind: 'resync', reason: 'unknown' }
    if (seq === this.lastSeq) return { kind: 'replay', entries: [] }
    const oldest = this.lastSeq - this.size + 1
    if (seq < oldest - 1) return { kind: 'resync', reason: 'too-old' }
    return { kind: 'replay', entries: this.entries.slice(this.head + (seq + 1 - oldest)) as HistoryEntry[] }
  }
}
