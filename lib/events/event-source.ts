import type { SseEvent } from './encoder'

/** One request's own events: an async iterable (an async generator, a Readable in object mode) of `{ data, event?, id?, retry? }`. */
export type PerRequestStream = AsyncIterable<SseEvent>

/**
 * What a factory is handed: the stream's id and a signal aborted when its events are no longer
 * wanted — the connection's end, or for a resumable stream its cancel (a client leaving stops nothing).
 */
export interface StreamContext {
  readonly id: string
  readonly signal: AbortSignal
}

/** A per-request stream, or a factory called once the stream is open (nothing to release if it never opens). */
export type StreamSource = PerRequestStream | ((context: StreamContext) => PerRequestStream)
