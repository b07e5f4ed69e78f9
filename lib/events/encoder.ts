/**
 * The SSE wire format. Every frame is encoded once into a Buffer that history and every
 * client's writer share; field values are checked so no input can inject a field.
 */

export interface EncodableEvent {
  data: unknown
  event?: string
  id?: string
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

/** The text of `data`: strings as they are, anything else as JSON. */
export function dataText (data: unknown): string {
  if (typeof data === 'string') return data
  const json = JSON.stringify(data)
  if (json === undefined) {
    throw new UnencodableDataError(typeof data)
  }
  return json
}

/** One event as a frame: optional `id:` and `event:`, one `data:` line per line of data. */
export function encodeEvent (event: EncodableEvent): Buffer {
  return encodeText(dataText(event.data), event.event, event.id)
}

/** The same, from data already turned into text by dataText(). */
export function encodeText (text: string, event: string | undefined, id: string | undefined): Buffer {
  let frame = ''
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
  if (!Number.isSafeInteger(ms) || ms < 0) {
    throw new RetryValueError(ms)
  }
  return Buffer.from(`retry: ${ms}\n\n`, 'latin1')
}

/** The shared heartbeat: a comment line that EventSource ignores and proxies see as traffic. */
export const HEARTBEAT_FRAME: Buffer = Buffer.from(':\n\n', 'latin1')
