import { group, integer, MAX_TIMER_MS } from '../shared/option-rules'

/** What the bus remembers of past broadcasts: events for Last-Event-ID replay, idempotency keys for retries. */
export interface HistoryOptions {
  /** Broadcasts kept for replay, by count; 0 keeps none (every resume resyncs). With Redis, the stream's length too. */
  events?: number
  /** …and by total frame bytes, per instance (the newest event is always kept). */
  bytes?: number
  /** How long a broadcast's idempotencyKey is remembered: a retry within it lands no second event. */
  idempotencyWindowMs?: number
}

export type HistorySettings = Required<HistoryOptions>

export const HISTORY_DEFAULTS: Readonly<HistorySettings> = Object.freeze({
  events: 1000,
  bytes: 1024 * 1024,
  idempotencyWindowMs: 300_000
})

export function parseHistoryOptions (value: unknown): HistorySettings {
  const given = group('history', value, Object.keys(HISTORY_DEFAULTS)) ?? {}
  const D = HISTORY_DEFAULTS
  return {
    events: integer('history.events', given.events, D.events, { min: 0 }),
    bytes: integer('history.bytes', given.bytes, D.bytes, { min: 0 }),
    idempotencyWindowMs: integer('history.idempotencyWindowMs', given.idempotencyWindowMs, D.idempotencyWindowMs, { min: 1, max: MAX_TIMER_MS })
  }
}
