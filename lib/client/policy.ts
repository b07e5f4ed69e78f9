/**
 * The client's reading of a response: pure functions, so they can be tested case by case. Its
 * delays (backoff, jitter) are lib/shared/backoff.ts, which the server's reconnects use too.
 */

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

/**
 * What a response means for the client: a stream, a reason to wait, the answer already complete
 * (204: the client has all of it, so nothing more will come), or a reason to stop.
 */
export type ResponseVerdict =
  | { kind: 'stream' }
  | { kind: 'wait', reason: 'refused' | 'server-error' }
  | { kind: 'done' }
  | { kind: 'stop', message: string }

export function classifyResponse (status: number, contentType: string | null): ResponseVerdict {
  if (status === 200) {
    if (/^text\/event-stream\s*(;|$)/i.test(contentType ?? '')) return { kind: 'stream' }
    return { kind: 'stop', message: `expected a text/event-stream response, got content-type ${JSON.stringify(contentType)}` }
  }
  if (status === 204) return { kind: 'done' }
  if (status === 429 || status === 503) return { kind: 'wait', reason: 'refused' }
  if (status >= 500 && status <= 599) return { kind: 'wait', reason: 'server-error' }
  return { kind: 'stop', message: `the server answered HTTP ${status}, which reconnecting cannot fix` }
}

// The codes the plugin sends in its own `event: error` (TOWER_SSE_STREAM_FAILED, …).
const SERVER_CODE = /^TOWER_SSE_[A-Z0-9_]+$/

/**
 * The code of the server's own `event: error` — data that is a JSON object whose `code` is a
 * TOWER_SSE_ code — or null: any other `error` event is an application's, a named event like any other.
 */
export function serverErrorCode (data: string): string | null {
  let parsed: unknown
  try {
    parsed = JSON.parse(data)
  } catch {
    return null
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return null
  const code = (parsed as { code?: unknown }).code
  return typeof code === 'string' && SERVER_CODE.test(code) ? code : null
}
