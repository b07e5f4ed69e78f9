import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { bodySocket, needsDrain } from './internals'

/** Where an open stream's frames go, and how much of them the transport has not taken yet. */
export interface StreamSink {
  write: (bytes: Buffer) => void
  /** Bytes handed on and not yet taken by the transport (what the byte budget counts). */
  readonly writableLength: number
  /** Whether the transport's buffer is past its high-water mark (a backpressured stream). */
  readonly needsDrain: boolean
  /** Calls `fn` once, at the transport's next `drain`. */
  onceDrained: (fn: () => void) => void
}

/** Through the response: HTTP/2 streams, and any HTTP/1 response before its head is out. */
class ResponseSink implements StreamSink {
  constructor (private readonly res: ServerResponse) {}

  write (bytes: Buffer): void {
    this.res.write(bytes)
  }

  get writableLength (): number {
    return this.res.writableLength
  }

  get needsDrain (): boolean {
    return needsDrain(this.res)
  }

  onceDrained (fn: () => void): void {
    this.res.once('drain', fn)
  }
}

/**
 * Straight to the socket of an HTTP/1 stream whose body runs until the close: the response would
 * only add its cork, a nextTick to uncork and its own checks to every write (a tenth of the CPU
 * of a lone event's fan-out in a profile), and has nothing left to do for such a body but end it.
 */
class SocketSink implements StreamSink {
  constructor (private readonly socket: Socket) {}

  write (bytes: Buffer): void {
    // A socket ended or destroyed takes nothing more; its close ends the stream.
    if (this.socket.writable) this.socket.write(bytes)
  }

  get writableLength (): number {
    return this.socket.writableLength
  }

  get needsDrain (): boolean {
    return this.socket.writableNeedDrain
  }

  onceDrained (fn: () => void): void {
    this.socket.once('drain', fn)
  }
}

export function responseSink (res: ServerResponse): StreamSink {
  return new ResponseSink(res)
}

/** The cheapest sink the response allows now; call once its head and first frames are written. */
export function sinkOf (res: ServerResponse): StreamSink {
  const socket = bodySocket(res)
  return socket === null ? new ResponseSink(res) : new SocketSink(socket)
}
