/**
 * Event ids are `<epoch>-<seq>`: the epoch (base-36 start time of this registry) tells a client's
 * Last-Event-ID from before a restart apart from one of ours, so it resyncs instead of silently
 * missing events; seq increases by one per broadcast.
 */
const ID_FORMAT = /^([0-9a-z]{1,11})-([1-9][0-9]{0,14})$/

/** Longest Last-Event-ID we read at all; anything longer is ignored unparsed. */
export const MAX_LAST_EVENT_ID_LENGTH = 1024

export interface ParsedEventId {
  epoch: string
  seq: number
}

export function newEpoch (now = Date.now()): string {
  return now.toString(36)
}

export function formatEventId (epoch: string, seq: number): string {
  return `${epoch}-${seq}`
}

/** A client-sent id, or null when it is absent, too long or not in our format (ignored). */
export function parseEventId (value: string | undefined): ParsedEventId | null {
  if (value === undefined || value.length > MAX_LAST_EVENT_ID_LENGTH) return null
  const match = ID_FORMAT.exec(value)
  if (match === null) return null
  const seq = Number(match[2])
  return Number.isSafeInteger(seq) ? { epoch: match[1], seq } : null
}
