/**
 * The benchmark event. Its first field is the send time, so a client finds it with a plain
 * string search (STAMP_MARKER … ',') instead of parsing JSON or SSE for every frame.
 */
export interface BenchEvent {
  /** Send time in µs on the machine-wide monotonic clock (see nowUs). */
  t: number
  /** Sequence number within the phase. */
  s: number
  /** Filler that brings the frame to about EVENT_FRAME_BYTES. */
  pad: string
}

/** What every contender serialises the event's data to: `{"t":` then digits. */
export const STAMP_MARKER = '{"t":'

/** Target size of one `data: …\n\n` frame (the issue's ~150-byte event). */
export const EVENT_FRAME_BYTES = 150

/**
 * Microseconds on CLOCK_MONOTONIC, which every process on the host shares: a client can
 * subtract the server's stamp from its own reading without any clock sync.
 */
export function nowUs (): number {
  return Number(process.hrtime.bigint() / 1000n)
}

const FRAME_OVERHEAD = 'data: \n\n'.length

/** The event for sequence number `s`, stamped now, padded so its frame is EVENT_FRAME_BYTES. */
export function benchEvent (s: number): BenchEvent {
  const event: BenchEvent = { t: nowUs(), s, pad: '' }
  const missing = EVENT_FRAME_BYTES - FRAME_OVERHEAD - JSON.stringify(event).length
  event.pad = 'x'.repeat(Math.max(0, missing))
  return event
}
