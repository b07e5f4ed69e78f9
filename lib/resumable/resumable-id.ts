import { createHash, createHmac, timingSafeEqual } from 'node:crypto'
import { randomId } from '../shared/random-id'

/**
 * The ids of a resumable stream's events: `r.<stream id>.<seq>.<seal>`, and `r.<stream id>.end.<seal>`
 * for its last one. The seal is an HMAC, under a secret the instances share, of the stream id and
 * its owner (the request's key): only the owner's requests can present an id that checks, so a
 * stream of another key and a stream that never existed are told apart by nothing (both 404), and an
 * id past the end needs no lookup to be answered 204.
 */

/** What an app may name a resumable stream: a message id, a UUID. */
const STREAM_ID = /^[A-Za-z0-9_-]{1,64}$/
const EVENT_ID = /^r\.([A-Za-z0-9_-]{1,64})\.(\d{1,15}|end)\.([A-Za-z0-9_-]{16})$/

export interface ResumableEventId {
  readonly streamId: string
  /** The sequence number of the event the client has, or 'end' once it has the last one. */
  readonly seq: number | 'end'
  readonly seal: string
}

export function isStreamId (value: unknown): value is string {
  return typeof value === 'string' && STREAM_ID.test(value)
}

/** An unguessable stream id: 128 random bits. */
export function newStreamId (): string {
  return randomId()
}

/** The owner as a log stores it: a hash, never the key itself (a user id, an email). */
export function ownerHash (key: string): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 32)
}

export function parseResumableEventId (value: string): ResumableEventId | null {
  const match = EVENT_ID.exec(value)
  if (match === null) return null
  return { streamId: match[1], seq: match[2] === 'end' ? 'end' : Number(match[2]), seal: match[3] }
}

/** Seals and checks the ids of one deployment's resumable streams. */
export class IdSeal {
  constructor (private readonly secret: Buffer) {}

  seal (streamId: string, owner: string): string {
    return createHmac('sha256', this.secret).update(`${streamId}\0${owner}`).digest('base64url').slice(0, 16)
  }

  /** Whether `id` was sealed for this stream and owner. */
  holds (id: ResumableEventId, owner: string): boolean {
    const expected = Buffer.from(this.seal(id.streamId, owner))
    const given = Buffer.from(id.seal)
    return given.length === expected.length && timingSafeEqual(given, expected)
  }

  eventId (streamId: string, seq: number | 'end', seal: string): string {
    return `r.${streamId}.${seq}.${seal}`
  }
}
