import { formatEventId, type EventPosition } from '../event-id'
import type { BusEvent, BusRead } from '../bus'
import { compareStreamIds, eventOf, fieldOf, positionOf, streamId, type EntryPlace, type StreamEntry } from './entry-codec'

/** Epochs a reader remembers having left (their ids are answered without asking Redis). */
const PAST_EPOCHS = 8

/** What the reader does with an entry it read, as the continuity state judges it. */
export type Step =
  /** The next event of the epoch: deliver it. */
  | { kind: 'next' }
  /** A hole before this entry (trimmed past the reader, or deleted): every stream here resyncs at it; it is not delivered. */
  | { kind: 'gap', at: EventPosition }
  /** A new epoch, followed from its marker: continuous when the marker proves nothing was lost, else every stream resyncs at it. */
  | { kind: 'epoch', at: EventPosition, continuous: boolean }
  /** Not to be judged from here (an epoch whose marker this reader never saw, a sequence gone back): the check runs before reading on. */
  | { kind: 'check' }
  /** The current epoch's own marker: nothing to deliver. */
  | { kind: 'same' }

/** A new epoch followed: where, and whether its marker proves nothing was lost. */
export type EpochStep = Extract<Step, { kind: 'epoch' }>

const NEXT: Step = { kind: 'next' }
const CHECK: Step = { kind: 'check' }
const SAME: Step = { kind: 'same' }

/**
 * Where this reader stands in the bus's history, and whether it can prove it lost nothing: the
 * epoch being delivered, its last delivered sequence number and stream id (the read cursor), and
 * whether a check is due. Pure (no Redis, no timers): the bus feeds it what it read and what the
 * check found, and does what each step says. It never delivers past a hole it cannot prove
 * empty: a sequence number that skips is a resync, one that goes back (a rollback) retires the
 * epoch, and a new epoch is continuous only if its marker names exactly the last event delivered.
 */
export class Continuity {
  private current: string | null = null
  private lastSeq = 0
  private readCursor = '0-0'
  /** Epochs delivered before the current one, newest last (a few suffice: ids that old are gone). */
  private readonly pastEpochs: string[] = []
  private due = false
  /** The reader met a sequence number at or below one it delivered, in the same epoch. */
  private rolledBack = false

  /** The epoch being delivered (null before start). */
  get epoch (): string | null {
    return this.current
  }

  /** The stream id to read after. */
  get cursor (): string {
    return this.readCursor
  }

  /** Whether the check must run before the next read (an idle spell, a reconnect, an entry not judged). */
  get checkDue (): boolean {
    return this.due
  }

  /**
   * Where reading starts: the server is in `epoch`, whose counter is at `seq` and whose marker is
   * `marker`; `tail` is the stream's newest entry, this epoch's newest unless it was trimmed or
   * deleted since.
   */
  start (epoch: string, seq: number, marker: string, tail: { id: string, place: EntryPlace } | undefined): void {
    this.current = epoch
    if (tail !== undefined && tail.place.epoch === epoch) {
      this.readCursor = tail.id
      this.lastSeq = tail.place.seq
    } else {
      this.readCursor = marker
      this.lastSeq = seq
    }
  }

  /** Whether `epoch` is one this reader delivered and left. */
  left (epoch: string): boolean {
    return this.pastEpochs.includes(epoch)
  }

  /** Continuity is in doubt until the check has run (an idle spell, a reconnect, a failed read). */
  suspect (): void {
    this.due = true
  }

  /** The entry `id` was read: what to do with it. */
  read (id: string, place: EntryPlace): Step {
    // While a check is due nothing is judged: the entries after the one that called for it are read again.
    if (this.due) return CHECK
    this.readCursor = id
    if (place.seq === 0) return place.epoch === this.current ? SAME : this.follow(place.epoch, id, place.previous)
    if (place.epoch !== this.current || !(place.seq > this.lastSeq)) {
      // An epoch whose marker this reader never saw (the check follows it), or a sequence gone
      // back within one: a rollback, so the check retires the epoch.
      this.rolledBack ||= place.epoch === this.current
      this.due = true
      return CHECK
    }
    const gap = place.seq !== this.lastSeq + 1
    this.lastSeq = place.seq
    return gap ? { kind: 'gap', at: positionOf(place.epoch, id) } : NEXT
  }

  /**
   * The check found the server vouching for the current epoch, its counter at `seq` and its
   * stream's newest id `tail`: whether acknowledged events are gone (a rollback seen, or the
   * counter or the tail below what this reader delivered), so the epoch must be retired.
   */
  mustRotate (seq: number, tail: string | undefined): boolean {
    return this.rolledBack || seq < this.lastSeq || tail === undefined || compareStreamIds(tail, this.readCursor) < 0
  }

  /** The check is done and the server is in `epoch`: true when that is a new epoch, to follow from its marker. */
  checked (epoch: string): boolean {
    this.rolledBack = false
    this.due = false
    return epoch !== this.current
  }

  /**
   * Follows `epoch` from its marker. Its clients lost nothing only if this reader had delivered
   * exactly the last event of the epoch the marker names; otherwise every stream here resyncs.
   */
  follow (epoch: string, marker: string, previous: EntryPlace['previous']): EpochStep {
    const continuous = previous !== undefined && previous.epoch === this.current && previous.seq === this.lastSeq
    if (this.current !== null && this.pastEpochs.push(this.current) > PAST_EPOCHS) this.pastEpochs.shift()
    this.current = epoch
    this.lastSeq = 0
    this.readCursor = marker
    return { kind: 'epoch', at: positionOf(epoch, marker), continuous }
  }
}

/**
 * A resume's history read, judged: `entries` is the stream from `after` (itself included: its
 * sequence number is where the contiguous run must start) up to `upTo`. The events after `after`
 * when they are all there, in one unbroken run of its epoch; otherwise why the client resyncs.
 */
export function judgeRange (entries: StreamEntry[], after: EventPosition, upTo: EventPosition, maxEvents: number): BusRead {
  const first = entries[0]
  if (first?.[0] !== streamId(after)) return { kind: 'gone', reason: 'too-old' }
  if (fieldOf(first[1], 'e') !== after.epoch) return { kind: 'gone', reason: 'unknown' }
  let seq = Number(fieldOf(first[1], 'n'))
  const events: BusEvent[] = []
  for (const [id, fields] of entries.slice(1)) {
    if (fieldOf(fields, 'e') !== after.epoch) break
    // A hole in the sequence: events after `after` were lost (trimmed, deleted, rolled back).
    if (Number(fieldOf(fields, 'n')) !== ++seq) return { kind: 'gone', reason: 'lost' }
    events.push(eventOf(id, fields))
  }
  if (events.length > maxEvents) return { kind: 'gone', reason: 'too-old' }
  const reached = events.at(-1)?.id ?? formatEventId(after)
  if (upTo.epoch === after.epoch && reached !== formatEventId(upTo)) return { kind: 'gone', reason: 'lost' }
  return { kind: 'events', events }
}
