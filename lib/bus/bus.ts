import type { BusStats } from '../observe/vocabulary'
import type { EventPosition } from './event-id'

export type { BusStats }

/**
 * The seam between the registry (who is connected here) and where events come from. A broadcast is
 * published to the bus, which assigns its position; every instance's one subscriber receives
 * every event, in position order, exactly once, and fans it out to its own streams. The bus owns
 * ids and positions; the registry only compares them.
 */

/** One event as published: everything an instance needs to encode the frame itself. */
export interface BusMessage {
  /** The text of the `data:` field(s), already checked by the registry. */
  readonly data: string
  readonly event?: string
  readonly topic?: string
  /** Put the assigned id into the (JSON object) data under this property when encoding. */
  readonly idProperty?: string
  /**
   * A retry of a publish with the same key, within the bus's idempotency window, lands no second
   * event: it resolves with the first publish's id (and `delivered` 0). The key is already scoped
   * to its producer (the registry prefixes it); the bus treats it as opaque.
   */
  readonly idempotencyKey?: string
  /**
   * The hash of what is published, stored with the key (set with it): a retry with the key and
   * another hash rejects with IdempotencyConflictError instead of answering the first id.
   */
  readonly idempotencyHash?: string
}

/** One event as delivered: the message plus the position and id the bus gave it. */
export interface BusEvent extends BusMessage {
  readonly position: EventPosition
  /** The SSE `id:` (opaque to clients, formatted from the position). */
  readonly id: string
}

/** What publish resolves with: the id it was given and how many streams of this instance took it. */
export interface Published {
  id: string
  delivered: number
}

export type BusRead =
  | { kind: 'events', events: BusEvent[] }
  /**
   * The client must resync: the bus no longer holds the position ('too-old'), never held it or
   * cannot vouch for its epoch ('unknown'), or holds it but lost events after it ('lost').
   */
  | { kind: 'gone', reason: 'too-old' | 'unknown' | 'lost' }
  /**
   * The position is of the epoch the bus is in now, which this instance has not reached yet (it
   * lagged while Redis was replaced): ask again once it has caught up, never answer from behind.
   */
  | { kind: 'behind' }

/** Called once per event, in order; returns how many local streams it was written to. */
export type Deliver = (event: BusEvent) => number

/** Where delivery goes on after a discontinuity, and why; every stream here must resync. */
export type Lost = (at: { id: string, position: EventPosition }, reason: string) => void

/**
 * Called while this instance cannot prove it receives what the bus carries (a shared bus only):
 * every stream here must be told and closed, so its client goes to a healthy instance.
 */
export type Deaf = () => void

/** Where the registry's history starts when an instance joins the bus. */
export interface StartPoint {
  /** Every event after this position will be delivered here (null: unknown, resumes resync). */
  floor: EventPosition | null
  /** The newest event so far, for lastEventId and resyncs (null: none yet). */
  last: { id: string, position: EventPosition } | null
}

export interface Bus {
  /** Whether other instances publish too: a client may then come back with an id this instance has not delivered yet. */
  readonly shared: boolean
  /**
   * Registers this instance's one delivery callback, the one told when delivery cannot go on
   * without a gap (events after `at` follow), and the one told when this instance has been deaf
   * too long; resolves once the bus can publish.
   */
  subscribe (deliver: Deliver, lost: Lost, deaf?: Deaf): Promise<StartPoint>
  /**
   * Assigns the next position; resolves once the bus has the event and this instance has delivered
   * it, or rejects with a coded error. A shared bus settles within its publish deadline.
   */
  publish (message: BusMessage): Promise<Published>
  /**
   * Events after `after` up to and including `upTo`, from the bus's own history. The registry asks only
   * a shared bus: a bus that is not shared has no history beyond the registry's ring.
   */
  read (after: EventPosition, upTo: EventPosition): Promise<BusRead>
  stats (): BusStats
  /**
   * Whether this instance can prove now that it receives what the bus carries (its own probe came
   * back within the receive deadline; out of memory counts as receiving, since only writes are
   * refused). While it cannot, admission refuses new streams: one opened then could not be fed.
   */
  receiving (): boolean
  /** Stops delivering; publishes after this reject. */
  close (): Promise<void>
}
