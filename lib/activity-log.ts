import type { FastifyBaseLogger } from 'fastify'

/** What happens to streams, counted both since start and in the current log window. */
export const ACTIVITY_KINDS = ['accepted', 'rejected', 'disconnected', 'expired', 'deadSwept', 'dropped', 'shutdown'] as const
export type ActivityKind = typeof ACTIVITY_KINDS[number]
export type ActivityCounts = Record<ActivityKind, number>

function zeroCounts (): ActivityCounts {
  return { accepted: 0, rejected: 0, disconnected: 0, expired: 0, deadSwept: 0, dropped: 0, shutdown: 0 }
}

/**
 * Counters instead of per-connection log lines: the incident wrote 774K lines in 2.5 days.
 * One summary line per window, and only for windows in which something happened.
 */
export class ActivityLog {
  readonly totals: ActivityCounts = zeroCounts()
  private window: ActivityCounts = zeroCounts()
  private windowPeak = 0

  count (kind: ActivityKind): void {
    this.totals[kind]++
    this.window[kind]++
  }

  /** The registry reports its size after each admission so the window knows its peak. */
  observeSize (size: number): void {
    if (size > this.windowPeak) this.windowPeak = size
  }

  /** Writes the summary for the window that just ended (if it saw any activity) and starts a new one. */
  flush (logger: FastifyBaseLogger, current: number, windowMs: number): boolean {
    const w = this.window
    const active = ACTIVITY_KINDS.some((kind) => w[kind] > 0)
    const peak = Math.max(this.windowPeak, current)
    this.window = zeroCounts()
    this.windowPeak = current
    if (!active) return false
    const summary = { tower_sse: { ...w, current, peak, windowMs } }
    const message = `tower-sse: ${w.accepted} connects, ${w.disconnected + w.expired + w.deadSwept + w.dropped + w.shutdown} closes ` +
      `(${w.expired} expired, ${w.deadSwept} swept, ${w.dropped} dropped), ${w.rejected} rejected; ${current} open, peak ${peak}`
    if (w.rejected > 0) logger.warn(summary, message)
    else logger.info(summary, message)
    return true
  }
}
