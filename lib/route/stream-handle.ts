import { encodeAppEvent, type SseEvent } from '../events/encoder'
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
 * The handle of an open stream. It asks nothing of the stream until the app does (most handles
 * are never looked at), and the stream it points to lets go of its connection when it ends, so a
 * handle the app keeps holds nothing of a closed one.
 */
export class OpenStream implements StreamHandle, StreamContext {
  readonly opened = true
  readonly id: string
  private controller: AbortController | null = null

  constructor (private readonly subscriber: Subscriber) {
    this.id = subscriber.id
  }

  get isOpen (): boolean {
    return !this.subscriber.isOver
  }

  get signal (): AbortSignal {
    if (this.controller === null) {
      const controller = new AbortController()
      this.controller = controller
      this.onClose((reason) => controller.abort(reason))
    }
    return this.controller.signal
  }

  send (event: SseEvent): boolean {
    return this.subscriber.write(encodeAppEvent(event))
  }

  end (): void {
    if (this.subscriber.isOver) return
    this.subscriber.write(END_FRAME)
    this.subscriber.end('ended')
  }

  onClose (fn: (reason: StreamEnd) => void): void {
    const { subscriber } = this
    subscriber.whenOver(() => fn(subscriber.endReason ?? 'disconnected'))
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
