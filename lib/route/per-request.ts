import type { FastifyBaseLogger } from 'fastify'
import { encodeAppEvent, encodeEvent, type SseEvent } from '../events/encoder'
import type { Subscriber } from '../streams/subscriber'
import { StreamSourceError } from '../errors'
import { nextTurn, PULLS_PER_TURN } from '../shared/slices'
import type { PerRequestStream, StreamContext, StreamSource } from '../events/event-source'

export type { PerRequestStream, StreamContext, StreamSource }

/** The last frame of a stream whose answer is complete: `event: end`, then the server closes. */
export const END_FRAME = encodeEvent({ event: 'end', data: {} })

/** Checks the `stream` a handler passed, before anything opens: a 500 (TOWER_SSE_BAD_STREAM) otherwise. */
export function checkSource (source: unknown): StreamSource {
  if (typeof source === 'function' || isAsyncIterable(source)) return source as StreamSource
  throw new StreamSourceError(source === null ? 'null' : typeof source)
}

function isAsyncIterable (value: unknown): value is PerRequestStream {
  return typeof value === 'object' && value !== null && typeof (value as PerRequestStream)[Symbol.asyncIterator] === 'function'
}

/**
 * Lets go of an iterable whose stream never opened (refused, HEAD, the client gone, a failed
 * opening): a Readable is destroyed, any other iterable's iterator returned — neither awaited, each
 * call guarded, so nothing the app's iterable does can throw here or hold anything up.
 */
export function release (source: StreamSource | undefined, log: FastifyBaseLogger): void {
  if (source === undefined || typeof source === 'function') return
  attempt(log, 'releasing a per-request stream that never opened', () => stopOf(source)?.call(source) ?? source[Symbol.asyncIterator]().return?.())
}

/** A Readable's (or any stream-like iterable's) destroy, or undefined. */
function stopOf (iterable: PerRequestStream): (() => unknown) | undefined {
  const destroy = (iterable as { destroy?: unknown }).destroy
  return typeof destroy === 'function' ? destroy as () => unknown : undefined
}

/** A failure of the app's iterable, told to the client in an `error` event before the stream ends. */
function errorFrame (code: string): Buffer {
  return encodeEvent({ event: 'error', data: { code } })
}

/**
 * Sends one request's own events to its stream only, through its writer: the next item is pulled
 * only once the previous one is written, and only while half the stream's byte budget is free, so
 * broadcasts to a reader that keeps up always find room. The stream's end (the client leaving,
 * shutdown, max age, a close) returns the iterator without waiting on it. When the iterable ends,
 * the stream gets `event: end` and is closed (counted as `ended`), unless `keepOpen`. A failure of
 * the iterable — getting its iterator, a `next()` that throws or rejects, an item that is no event or
 * can never fit the budget — is logged once with the stream's id, sent as `event: error` with its
 * code, and ends the stream (counted as `streamFailed`) with a `retry:`.
 *
 * Nothing of the stream stays reachable from a `next()` that never settles: the pump races it
 * against the stream's end and returns, so only the iterable's own state waits on it.
 */
export async function pump (subscriber: Subscriber, source: StreamSource, log: FastifyBaseLogger, keepOpen: boolean, budget: number, context: StreamContext): Promise<void> {
  let iterable: PerRequestStream
  let iterator: AsyncIterator<SseEvent>
  const fail = async (code: string, error: unknown): Promise<void> => {
    log.error({ err: error, streamId: subscriber.id }, `tower-sse: a per-request stream failed (${code}); its stream is closed with a retry`)
    const frame = errorFrame(code)
    // Told once there is room: written past a budget still full of the last item, the frame would drop the stream as too slow.
    if (!await subscriber.whenFits(frame.length)) return
    subscriber.write(frame)
    subscriber.end('streamFailed')
  }
  try {
    iterable = typeof source === 'function' ? source(context) : source
    iterator = iterable[Symbol.asyncIterator]()
  } catch (error) {
    await fail('TOWER_SSE_STREAM_FAILED', error)
    return
  }
  // A Readable is destroyed: its iterator's return() would wait for data that may never come.
  subscriber.whenOver(() => attempt(log, 'stopping a per-request stream', () => stopOf(iterable)?.call(iterable) ?? iterator.return?.()))
  for (let pulls = 1; ; pulls++) {
    // An always-ready iterable would otherwise fill the whole budget (and many streams, the loop) in one turn.
    if (pulls % PULLS_PER_TURN === 0) await nextTurn()
    let next: IteratorResult<SseEvent> | undefined
    try {
      next = await subscriber.whileOpen(iterator.next())
    } catch (error) {
      if (!subscriber.isOver) await fail('TOWER_SSE_STREAM_FAILED', error)
      return
    }
    if (next === undefined || subscriber.isOver) return
    if (next.done === true) {
      if (!keepOpen) {
        subscriber.write(END_FRAME)
        subscriber.end('ended')
      }
      return
    }
    let frame: Buffer
    try {
      frame = encodeAppEvent(eventOf(next.value))
    } catch (error) {
      await fail('TOWER_SSE_STREAM_FAILED', error)
      return
    }
    if (frame.length > budget) {
      await fail('TOWER_SSE_ITEM_TOO_LARGE', new Error(`an item of ${frame.length} bytes can never fit this stream's ${budget}-byte budget (maxBufferedBytes)`))
      return
    }
    if (!await subscriber.whenFits(frame.length, budget / 2)) return
    subscriber.write(frame)
  }
}

/** Calls into the app's iterable: a synchronous throw or a rejection is logged, never thrown, never awaited. */
function attempt (log: FastifyBaseLogger, what: string, call: () => unknown): void {
  const failed = (error: unknown): void => { log.warn({ err: error }, `tower-sse: ${what} threw; ignored`) }
  try {
    const result = call()
    if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') Promise.resolve(result).catch(failed)
  } catch (error) {
    failed(error)
  }
}

function eventOf (item: unknown): SseEvent {
  if (typeof item !== 'object' || item === null || !('data' in item)) {
    throw new TypeError(`tower-sse: a per-request stream's items must be events { data, event?, id?, retry? }, got ${item === null ? 'null' : typeof item}`)
  }
  return item as SseEvent
}
