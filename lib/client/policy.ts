/**
 * The reconnect policy: pure functions, so it can be tested over many seeded draws.
 * Where EventSource gives up (503) or comes back at a fixed pace, these spread clients out.
 */

/** A source of uniform numbers in [0, 1); injectable so tests can seed it. */
export type RandomSource = () => number

/**
 * Exponential backoff with full jitter: uniform in [0, min(cap, base × 2^(failures - 1))].
 * Full jitter spreads clients that failed together over the whole window instead of a band.
 */
export function backoffDelayMs (failures: number, random: RandomSource, baseMs: number, capMs: number): number {
  if (!Number.isSafeInteger(failures) || failures < 1) {
    throw Object.assign(new RangeError(`tower-sse/client: failures must be an integer >= 1, got ${failures}`), { code: 'TOWER_SSE_CLIENT_ARGUMENT' })
  }
  // 2^(failures-1) overflows to Infinity for huge counts, which the cap absorbs.
  const ceiling = Math.min(capMs, baseMs * 2 ** (failures - 1))
  return Math.floor(random() * ceiling)
}

/** A wait of at least `ms`, stretched by up to `ratio` × ms so that clients do not return together. */
export function jitterUpMs (ms: number, ratio: number, random: RandomSource): number {
  return Math.round(ms * (1 + ratio * random()))
}

// The HTTP-date every current server sends (RFC 9110 IMF-fixdate); Date.parse alone accepts
// almost anything ("-3" is a year), so the shape is checked first.
const IMF_FIXDATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/

/**
 * A `Retry-After` value (RFC 9110 §10.2.3: delay-seconds or an IMF-fixdate HTTP-date) as ms from
 * `nowMs`, or null when absent or unreadable (the caller then backs off). A past date means 0.
 */
export function parseRetryAfterMs (value: string | null, nowMs: number): number | null {
  if (value === null) return null
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const date = IMF_FIXDATE.test(text) ? Date.parse(text) : Number.NaN
  return Number.isNaN(date) ? null : Math.max(0, date - nowMs)
}

/** What a response means for the client: a stream, a reason to wait, or a reason to stop. */
export type ResponseVerdict =
  | { kind: 'stream' }
  | { kind: 'wait', reason: 'refused' | 'server-error' }
  | { kind: 'stop', message: string }

export function classifyResponse (status: number, contentType: string | null): ResponseVerdict {
  if (status === 200) {
    if (/^text\/event-stream\s*(;|$)/i.test(contentType ?? '')) return { kind: 'stream' }
    return { kind: 'stop', message: `expected a text/event-stream response, got content-type ${JSON.stringify(contentType)}` }
  }
  if (status === 204) return { kind: 'stop', message: 'the server answered 204 No Content: it asks the client to stop reconnecting' }
  if (status === 429 || status === 503) return { kind: 'wait', reason: 'refused' }
  if (status >= 500 && status <= 599) return { kind: 'wait', reason: 'server-error' }
  return { kind: 'stop', message: `the server answered HTTP ${status}, which reconnecting cannot fix` }
}
