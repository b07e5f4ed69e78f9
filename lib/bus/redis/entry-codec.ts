import { formatEventId, type EventPosition } from '../event-id'
import type { BusEvent, BusMessage } from '../bus'

/**
 * A bus stream entry's fields, as the script writes them: `e` epoch, `n` sequence number (0: the
 * epoch's start marker, which may name the epoch it follows as `p` and that epoch's last sequence
 * number as `q`), `d` data, `o` the publishing instance's token, `v` event, `t` topic, `i` the id
 * property. Redis gives every entry a stream id `<ms>-<seq>`.
 */
export type StreamEntry = [id: string, fields: string[]]

/** Where an entry says it sits: its epoch and sequence number, and for a marker the epoch it follows. */
export interface EntryPlace {
  epoch: string
  seq: number
  previous?: { epoch: string, seq: number }
}

/** The fields a publish hands the script (it adds `e` and `n`). */
export function messageFields (message: BusMessage, token: string): string[] {
  const fields = ['d', message.data, 'o', token]
  if (message.event !== undefined) fields.push('v', message.event)
  if (message.topic !== undefined) fields.push('t', message.topic)
  if (message.idProperty !== undefined) fields.push('i', message.idProperty)
  return fields
}

export function fieldOf (fields: string[], name: string): string | undefined {
  for (let i = 0; i < fields.length; i += 2) {
    if (fields[i] === name) return fields[i + 1]
  }
  return undefined
}

export function placeOf (fields: string[]): EntryPlace {
  const place: EntryPlace = { epoch: fieldOf(fields, 'e') ?? '', seq: Number(fieldOf(fields, 'n')) }
  const previous = fieldOf(fields, 'p')
  if (previous !== undefined) place.previous = { epoch: previous, seq: Number(fieldOf(fields, 'q')) }
  return place
}

/** The publishing instance's token (which publish of which instance this entry is). */
export function tokenOf (fields: string[]): string | undefined {
  return fieldOf(fields, 'o')
}

export function eventOf (id: string, fields: string[]): BusEvent {
  const position = positionOf(fieldOf(fields, 'e') ?? '', id)
  return {
    position,
    id: formatEventId(position),
    data: fieldOf(fields, 'd') ?? '',
    event: fieldOf(fields, 'v'),
    topic: fieldOf(fields, 't'),
    idProperty: fieldOf(fields, 'i')
  }
}

export function positionOf (epoch: string, id: string): EventPosition {
  const dash = id.indexOf('-')
  return { epoch, major: Number(id.slice(0, dash)), minor: Number(id.slice(dash + 1)) }
}

export function streamId (position: EventPosition): string {
  return `${position.major}-${position.minor ?? 0}`
}

export function compareStreamIds (a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt)
  const [bm, bs] = b.split('-').map(BigInt)
  return am === bm ? Number(as - bs) : Number(am - bm)
}
