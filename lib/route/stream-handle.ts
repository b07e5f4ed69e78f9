import { encodeEvent, type SseEvent } from '../events/encoder'
import type { CloseReason } from '../observe/vocabulary'
import type { Subscriber } from '../streams/subscriber'
import { END_FRAME, type StreamContext } from './per-request'

/** How a stream ended: a close cause, or `notOpened` (refused, HEAD, the client gone, answered already). */
export type StreamEnd = CloseReason | 'notOpened'

/** What `reply.eventStream.subscribe()` resolves with: this one connection's stream, for its handler. */
export interface StreamHandle {
  /** The stream's id (as `app.sse` iteration and `send({ id })` know it); '' when it never opened. */
  readonly id: string
  /** Whether the stream opened: false when it was refused, was a HEAD, or its client was gone. */
  readonly opened: boolean
  /** Whether it is open now. */
  readonly isOpen: boolean
  /** Aborted when the stream ends, whatever ends it (at once when it never opened); its `reason` is a StreamEnd. */
  readonly signal: AbortSignal
  /** Sends one event to this stream only, now (no bus, no history); false when it was not written (ended, or dropped as too slow). */
  send: (event: SseEvent) => boolean
  /** Ends the stream as complete: `event: end`, then the server closes, counted as `ended`. */
  end: () => void
  /** Calls `fn` once with how the stream ended (at once if it already has). */
  onClose: (fn: (reason: StreamEnd) => void) => void
}

/**
 * The handle of an open stream. It lets go of the stream when it ends, so a handle the app keeps
 * holds nothing of a closed connection; its signal is made only when asked for.
 */
export class OpenStream implements StreamHandle, StreamContext {
  readonly opened = true
  readonly id: string
  private subscriber: Subscriber | null
  private controller: AbortController | null = null
  private reason: StreamEnd | null = null

  constructor (subscriber: Subscriber) {
    this.id = subscriber.id
    this.subscriber = subscriber
    subscriber.whenOver(() => {
      this.reason = subscriber.endReason ?? 'disconnected'
      this.subscriber = null
      this.controller?.abort(this.reason)
    })
  }

  get isOpen (): boolean {
    return this.subscriber !== null
  }

  get signal (): AbortSignal {
    if (this.controller === null) {
      this.controller = new AbortController()
      if (this.reason !== null) this.controller.abort(this.reason)
    }
    return this.controller.signal
  }

  send (event: SseEvent): boolean {
    const frame = encodeEvent(event)
    return this.subscriber?.write(frame) ?? false
  }

  end (): void {
    const subscriber = this.subscriber
    if (subscriber === null) return
    subscriber.write(END_FRAME)
    subscriber.end('ended')
  }

  onClose (fn: (reason: StreamEnd) => void): void {
    if (this.subscriber === null) fn(this.reason ?? 'disconnected')
    else this.subscriber.whenOver(() => fn(this.reason ?? 'disconnected'))
  }
}

/** The handle of a stream that never opened. */
export function notOpened (): StreamHandle {
  return {
    id: '',
    opened: false,
    isOpen: false,
    signal: AbortSignal.abort('notOpened'),
    send: () => false,
    end: () => {},
    onClose: (fn) => fn('notOpened')
  }
}
