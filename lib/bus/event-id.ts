/**
 * Event ids are opaque to clients: `<epoch>-<offset>`. The epoch names one run of the bus's
 * storage (a memory bus's start, a Redis stream's life), so an id from a lost history is
 * recognised and answered with a resync instead of a silent gap. The offset is the bus's own
 * position: `<seq>` for the memory bus, a Redis stream id `<ms>-<seq>` for the Redis bus.
 * Positions are compared, never subtracted: they need not be contiguous.
 */
const ID_FORMAT = /^([0-9a-z]{1,16})-([1-9][0-9]{0,15})(?:-([1-9][0-9]{0,15}|0))?$/

/** Longest Last-Event-ID we read at all; anything longer is ignored unparsed. */
export const MAX_LAST_EVENT_ID_LENGTH = 1024

/** Where an event sits in the bus's history: the epoch plus an offset of one or two integers. */
export interface EventPosition {
  readonly epoch: string
  readonly major: number
  /** null: the offset is a single integer (memory bus). */
  readonly minor: number | null
}

/** Same as EventPosition: what a client sent as Last-Event-ID, parsed. */
export type ParsedEventId = EventPosition

export function newEpoch (now = Date.now()): string {
  return now.toString(36)
}

export function formatEventId (position: EventPosition): string {
  return position.minor === null
    ? `${position.epoch}-${position.major}`
    : `${position.epoch}-${position.major}-${position.minor}`
}

/**
 * Orders two positions of the same epoch (negative: a is older). Positions of different epochs
 * have no order; callers check the epoch first.
 */
export function comparePositions (a: EventPosition, b: EventPosition): number {
  if (a.major !== b.major) return a.major < b.major ? -1 : 1
  const am = a.minor ?? 0
  const bm = b.minor ?? 0
  return am === bm ? 0 : am < bm ? -1 : 1
}

/** A client-sent id, or null when it is absent, too long or not in our format (ignored). */
export function parseEventId (value: string | undefined): ParsedEventId | null {
  if (value === undefined || value.length > MAX_LAST_EVENT_ID_LENGTH) return null
  const match = ID_FORMAT.exec(value)
  if (match === null) return null
  const major = Number(match[2])
  const minor = match[3] === undefined ? null : Number(match[3])
  if (!Number.isSafeInteger(major) || (minor !== null && !Number.isSafeInteger(minor))) return null
  return { epoch: match[1], major, minor }
}
