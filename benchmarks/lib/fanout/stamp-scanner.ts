import { STAMP_MARKER } from './payload'

/**
 * Finds the send stamps in a stream's raw bytes with two indexOf calls a frame: the client
 * processes hold thousands of streams and their CPU must not be what the benchmark measures.
 * The stamp's digits cannot be mistaken for HTTP chunk framing (hex size lines between frames),
 * and a marker or stamp split across reads is carried over to the next one.
 */
export class StampScanner {
  private carry = ''

  /** `marker` is what precedes the stamp's digits (the cluster benchmark's stamp is in a notification's title). */
  constructor (private readonly marker: string = STAMP_MARKER) {}

  /** Calls `onStamp` for each complete stamp in `chunk` (after what earlier chunks left over). */
  scan (chunk: Buffer, onStamp: (stampUs: number) => void): void {
    const text = this.carry + chunk.toString('latin1')
    let from = 0
    for (;;) {
      const at = text.indexOf(this.marker, from)
      if (at === -1) break
      const end = text.indexOf(',', at + this.marker.length)
      if (end === -1) {
        this.carry = text.slice(at)
        return
      }
      onStamp(Number(text.slice(at + this.marker.length, end)))
      from = end
    }
    // Keep just enough of the tail to complete a marker that the next read finishes.
    this.carry = text.slice(Math.max(from, text.length - (this.marker.length - 1)))
  }
}
