import { postNotify } from '../lib/clients/notify'
import type { PostLog } from '../lib/clients/notify'

/** One notify of a chaos row: when it was sent and how (and when) it was answered. */
export interface PostRecord {
  seq: number
  sentAt: number
  answeredAt: number
  /**
   * 200; 503 TOWER_SSE_PUBLISH_UNKNOWN (the bus cannot say: written before the answer, or never);
   * another status (503…); or no answer within the poster's timeout (the client gave up).
   */
  outcome: 'accepted' | 'unknown' | 'refused' | 'timeout'
  /** The answer's status; 0 for a timeout. */
  status: number
}

/**
 * Posts sequence numbers `firstSeq`, `firstSeq + 1`, … at `perSec` for `durationMs` (or until
 * `until()` says so) without
 * waiting for answers (as many callers would: a stalled Redis then piles requests up), at most
 * `maxInFlight` at once (a tick past it is skipped and counted). Each POST gives up after
 * `timeoutMs`: a publish delivered after that was delivered late.
 */
export async function postAtRate (
  port: number,
  options: { firstSeq: number, perSec: number, durationMs: number, timeoutMs: number, maxInFlight: number, bodyBytes: number, until?: () => boolean },
  records: PostRecord[]
): Promise<{ nextSeq: number, skipped: number }> {
  const { perSec, durationMs, timeoutMs, maxInFlight } = options
  const body = 'x'.repeat(options.bodyBytes)
  const intervalMs = 1000 / perSec
  const start = Date.now()
  const inFlight = new Set<Promise<void>>()
  let seq = options.firstSeq
  let skipped = 0
  for (let tick = 0; tick * intervalMs < durationMs && options.until?.() !== true; tick++) {
    const wait = start + tick * intervalMs - Date.now()
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
    if (inFlight.size >= maxInFlight) {
      skipped++
      continue
    }
    const mine = seq++
    const sentAt = Date.now()
    const posting = postNotify(port, { type: 'bench', title: String(mine), body }, timeoutMs).then((answer) => {
      const outcome = answer.kind === 'no-answer' ? 'timeout' : answer.status === 200 ? 'accepted' : answer.code === 'TOWER_SSE_PUBLISH_UNKNOWN' ? 'unknown' : 'refused'
      records.push({ seq: mine, sentAt, answeredAt: Date.now(), outcome, status: answer.kind === 'no-answer' ? 0 : answer.status })
      inFlight.delete(posting)
    })
    inFlight.add(posting)
  }
  await Promise.all(inFlight)
  records.sort((a, b) => a.seq - b.seq)
  return { nextSeq: seq, skipped }
}

/**
 * The records as the clients' accounting reads them: only 200s count as published; a refusal or a
 * timeout is a publish the caller was told failed, so receiving it is a late delivery ("unexpected");
 * an "outcome unknown" may arrive or not (docs/bus-guarantees.md): neither lost nor late.
 */
export function postLogOf (records: readonly PostRecord[]): PostLog {
  const log: PostLog = { accepted: [], refused: [], unknown: [], acceptedAt: new Map() }
  for (const r of records) {
    if (r.outcome === 'accepted') {
      log.accepted.push(r.seq)
      log.acceptedAt.set(r.seq, r.answeredAt)
    } else if (r.outcome === 'unknown') log.unknown.push(r.seq)
    else log.refused.push({ seq: r.seq, status: r.status, retryAfter: null, at: r.answeredAt })
  }
  return log
}
