import type { FastifyBaseLogger } from 'fastify'
import { encodeEvent, type SseEvent } from '../events/encoder'
import type { Subscriber } from '../streams/subscriber'

/** What subscribe's `stream` may be: an async iterable of events (a Readable in object mode is one). */
export type PerRequestStream = AsyncIterable<SseEvent>

/**
 * Sends one request's own events to its stream only, through its writer and under its byte
 * budget: the next item is pulled only once the previous one fits. The stream's end (the client
 * leaving, shutdown, max age, a close) calls the iterator's return(), so a generator's finally
 * runs. When the iterable ends the stream stays open for broadcasts. A throw (or an item that is
 * not an encodable event) is logged, and the stream ends with `lastFrames` (a retry:), counted as
 * `streamFailed`.
 */
export async function pumpStream (client: Subscriber, items: PerRequestStream, log: FastifyBaseLogger): Promise<void> {
  const iterator = items[Symbol.asyncIterator]()
  let running = true
  client.whenOver(() => {
    if (running) void Promise.resolve(iterator.return?.()).catch(() => {})
  })
  try {
    while (!client.isOver) {
      const next = await iterator.next()
      if (next.done === true || client.isOver) break
      const frame = encodeEvent(eventOf(next.value))
      if (!await client.whenFits(frame.length)) break
      client.write(frame)
    }
  } catch (error) {
    log.error({ err: error, streamId: client.id }, 'tower-sse: a per-request stream threw; its stream is closed with a retry')
    client.end('streamFailed')
  } finally {
    running = false
  }
}

function eventOf (item: unknown): SseEvent {
  if (typeof item !== 'object' || item === null || !('data' in item)) {
    throw new TypeError(`tower-sse: a per-request stream's items must be events { data, event?, id? }, got ${item === null ? 'null' : typeof item}`)
  }
  return item as SseEvent
}
