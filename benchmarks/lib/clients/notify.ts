import http from 'node:http'

/** How long one notify POST may take before its fate is called unknown. */
export const NOTIFY_TIMEOUT_MS = 3000

/** How one POST /api/notify ended: its status (and Retry-After), or no answer at all. */
export type NotifyOutcome =
  | { kind: 'answered', status: number, retryAfter: string | null, code: string | null }
  | { kind: 'no-answer', error: string }

/**
 * Posts one notification on a new connection (so that node:cluster hands each POST to the next
 * worker), or on `agent`'s kept-alive one when given (a soak's hundreds per second), answered or
 * not within `timeoutMs`.
 */
export function postNotify (
  port: number, notification: { type: string, title: string, body: string }, timeoutMs: number, agent?: http.Agent
): Promise<NotifyOutcome> {
  const body = JSON.stringify(notification)
  const reuse = agent !== undefined
  return new Promise((resolve) => {
    const request = http.request({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path: '/api/notify',
      agent: reuse ? agent : false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: reuse ? 'keep-alive' : 'close' },
      timeout: timeoutMs
    }, (response) => {
      // The first KB of the body is enough for a refusal's `code`; the rest is read and dropped.
      let head = ''
      response.setEncoding('utf8')
      response.on('data', (chunk: string) => { if (head.length < 1024) head += chunk })
      response.once('end', () => resolve({ kind: 'answered', status: response.statusCode ?? 0, retryAfter: response.headers['retry-after'] ?? null, code: codeOf(head) }))
      response.once('error', (error) => resolve({ kind: 'no-answer', error: error.message }))
    })
    request.once('timeout', () => request.destroy(new Error(`no answer within ${timeoutMs} ms`)))
    request.once('error', (error) => resolve({ kind: 'no-answer', error: error.message }))
    request.end(body)
  })
}

/** The `code` of a JSON error body, or null. */
function codeOf (body: string): string | null {
  try {
    const code = (JSON.parse(body) as { code?: unknown }).code
    return typeof code === 'string' ? code : null
  } catch {
    return null
  }
}

/** What a run of sequenced posts got back: which sequence numbers were accepted, refused, unanswered. */
export interface PostLog {
  accepted: number[]
  /** Sequence number → status, for every answer other than 200. */
  refused: Array<{ seq: number, status: number, retryAfter: string | null, at: number }>
  unknown: number[]
  /** Epoch ms at which each accepted sequence number was answered. */
  acceptedAt: Map<number, number>
}

export function emptyPostLog (): PostLog {
  return { accepted: [], refused: [], unknown: [], acceptedAt: new Map() }
}

/** Files the answer to sequence number `seq` under accepted, refused or unknown. */
export function recordPost (log: PostLog, seq: number, outcome: NotifyOutcome): void {
  if (outcome.kind === 'no-answer') log.unknown.push(seq)
  else if (outcome.status === 200) {
    log.accepted.push(seq)
    log.acceptedAt.set(seq, Date.now())
  } else log.refused.push({ seq, status: outcome.status, retryAfter: outcome.retryAfter, at: Date.now() })
}

/**
 * Posts sequence numbers `firstSeq`, `firstSeq + 1`, … one at a time (never two in flight, so
 * publication order is sequence order) at `perSec`, for `durationMs`: a tick that comes while a
 * POST is still out is skipped, not queued.
 */
export async function postSequence (
  port: number, firstSeq: number, perSec: number, durationMs: number, timeoutMs: number, log: PostLog, agent?: http.Agent
): Promise<number> {
  const intervalMs = 1000 / perSec
  const start = Date.now()
  let seq = firstSeq
  for (let tick = 0; tick * intervalMs < durationMs; tick++) {
    const due = start + tick * intervalMs
    const wait = due - Date.now()
    if (wait < -intervalMs) continue
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
    recordPost(log, seq, await postNotify(port, { type: 'bench', title: String(seq), body: '' }, timeoutMs, agent))
    seq++
  }
  return seq
}

export interface PostSummary {
  posted: number
  accepted: number
  /** Answers other than 200, by status. */
  refused: Record<string, number>
  /** POSTs with no answer (the worker handling it was killed): maybe published, maybe not. */
  unanswered: number
}

export function postSummary (log: PostLog): PostSummary {
  const refused: Record<string, number> = {}
  for (const r of log.refused) refused[r.status] = (refused[r.status] ?? 0) + 1
  return { posted: log.accepted.length + log.refused.length + log.unknown.length, accepted: log.accepted.length, refused, unanswered: log.unknown.length }
}
