/**
 * The SSE wire format. Every frame is encoded once into a Buffer that history and every
 * client's writer share; field values are checked so no input can inject a field.
 */

/** An event as the application describes it: `data` that is not a string is sent as JSON. */
export interface SseEventInit {
  data: unknown
  /** The `event:` field (event type); omitted means a plain `message`. */
  event?: string
}

/** One event of a per-request stream: an event with its own `id:` (a string or a number) and `retry:`. */
export interface SseEvent extends SseEventInit {
  id?: string | number
  /** The client's reconnection time from this event on, in ms. */
  retry?: number
}

const LINE_BREAK = /\r\n|\r|\n/
const FORBIDDEN_IN_FIELD = /[\r\n\0]/

import { EventFieldError, RetryValueError, UnencodableDataError } from '../errors'

export function checkField (name: string, value: string): void {
  if (typeof value !== 'string') {
    throw new EventFieldError(name, `be a string, got ${typeof value}`)
  }
  if (FORBIDDEN_IN_FIELD.test(value)) {
    throw new EventFieldError(name, `not contain CR, LF or NUL: ${JSON.stringify(value)}`)
  }
}

/**
 * Event names tower-sse/client acts on: `end` closes it for good, `refused` makes it wait as for a
 * 503. The plugin's own; an app's event by either name would stop or hold every client it reaches.
 */
const RESERVED_EVENTS: ReadonlySet<string> = new Set(['end', 'refused'])

/** An app's event name: a safe field, and not one of tower-sse's own. */
export function checkEventName (event: string): void {
  checkField('event', event)
  if (RESERVED_EVENTS.has(event)) throw new EventFieldError('event', `not be ${JSON.stringify(event)}, a name tower-sse/client acts on (the plugin's own)`)
}

/** An app's event, encoded: its name checked against tower-sse's own first. */
export function encodeAppEvent (event: SseEventInit): Buffer {
  if (event.event !== undefined) checkEventName(event.event)
  return encodeEvent(event)
}

/** The text of `data`: strings as they are, anything else as JSON. */
export function dataText (data: unknown): string {
  if (typeof data === 'string') return data
  let json: string | undefined
  try {
    json = JSON.stringify(data)
  } catch (error) {
    // A BigInt, a cycle, or a toJSON() that throws.
    throw new UnencodableDataError((error as Error).message)
  }
  if (json === undefined) throw new UnencodableDataError(`a value of type ${typeof data}`)
  return json
}

/** One event as a frame: optional `retry:`, `id:` and `event:`, one `data:` line per line of data. */
export function encodeEvent (event: SseEvent): Buffer {
  const { id } = event
  return encodeText(dataText(event.data), event.event, typeof id === 'number' ? numericId(id) : id, event.retry)
}

/** A number as an `id:`: finite, written as JSON writes it (`7`, not `7.0`). */
function numericId (id: number): string {
  if (!Number.isFinite(id)) throw new EventFieldError('id', `be a string or a finite number, got ${String(id)}`)
  return String(id)
}

/** The same, from data already turned into text by dataText(). */
export function encodeText (text: string, event: string | undefined, id: string | undefined, retry?: number): Buffer {
  let frame = retry === undefined ? '' : `retry: ${retryMs(retry)}\n`
  if (id !== undefined) {
    checkField('id', id)
    frame += `id: ${id}\n`
  }
  if (event !== undefined) {
    checkField('event', event)
    frame += `event: ${event}\n`
  }
  for (const line of text.split(LINE_BREAK)) {
    frame += `data: ${line}\n`
  }
  return Buffer.from(frame + '\n', 'utf8')
}

/** A `retry:` frame; the spec accepts ASCII digits only. */
export function encodeRetry (ms: number): Buffer {
  return Buffer.from(`retry: ${retryMs(ms)}\n\n`, 'latin1')
}

function retryMs (ms: number): number {
  if (!Number.isSafeInteger(ms) || ms < 0) throw new RetryValueError(ms)
  return ms
}

/** The shared heartbeat: a comment line that EventSource ignores and proxies see as traffic. */
export const HEARTBEAT_FRAME: Buffer = Buffer.from(':\n\n', 'latin1')
