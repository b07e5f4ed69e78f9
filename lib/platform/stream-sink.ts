import type { ServerResponse } from 'node:http'
import { needsDrain } from './internals'

/** Where an open stream's frames go, and how much of them the transport has not taken yet. */
export interface StreamSink {
  write: (bytes: Buffer) => void
  /** Bytes handed on and not yet taken by the transport (what the byte budget counts). */
  readonly writableLength: number
  /** Whether the transport's buffer is past its high-water mark (a backpressured stream). */
  readonly needsDrain: boolean
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
}

export function responseSink (res: ServerResponse): StreamSink {
  return new ResponseSink(res)
}
