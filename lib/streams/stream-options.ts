import { JITTER_RATIO } from '../shared/jitter'
import { integer, MAX_TIMER_MS } from '../shared/option-rules'

/** How an open stream is kept: its heartbeat, its lifetime, its byte budget and its end at shutdown. */
export interface StreamOptions {
  /** Period of the one shared heartbeat timer (a comment frame and the dead-client sweep), in ms. */
  heartbeatMs?: number
  /** Lifetime of a stream (± 20%) before the server ends it, in ms; 0: no expiry. */
  maxAgeMs?: number
  /** Unsent bytes a stream may have queued before it is dropped as too slow. */
  maxBufferedBytes?: number
  /** Shutdown ends the streams in staggered batches over this many ms. */
  drainMs?: number
}

export type StreamSettings = Required<StreamOptions>

export const STREAM_DEFAULTS: Readonly<StreamSettings> = Object.freeze({
  heartbeatMs: 30_000,
  maxAgeMs: 300_000,
  maxBufferedBytes: 1024 * 1024,
  drainMs: 500
})

export const STREAM_OPTIONS = Object.keys(STREAM_DEFAULTS) as ReadonlyArray<keyof StreamSettings>

/** Heartbeats in a row a backpressured stream may take no byte before it is swept as dead. */
export const MAX_STALLED_HEARTBEATS = 2

export function parseStreamOptions (given: Record<string, unknown>): StreamSettings {
  const D = STREAM_DEFAULTS
  return {
    heartbeatMs: integer('heartbeatMs', given.heartbeatMs, D.heartbeatMs, { min: 1, max: MAX_TIMER_MS }),
    // With its jitter, a lifetime still fits a timer.
    maxAgeMs: integer('maxAgeMs', given.maxAgeMs, D.maxAgeMs, { min: 0, max: Math.floor(MAX_TIMER_MS / (1 + JITTER_RATIO)) }),
    maxBufferedBytes: integer('maxBufferedBytes', given.maxBufferedBytes, D.maxBufferedBytes, { min: 1 }),
    drainMs: integer('drainMs', given.drainMs, D.drainMs, { min: 0, max: 60_000 })
  }
}
