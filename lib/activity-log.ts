import type { FastifyBaseLogger } from 'fastify'
import type { RefusalReason } from './admission'

/** What happens to streams, counted both since start and in the current log window. */
export const ACTIVITY_KINDS = ['accepted', 'rejected', 'tarpitted', 'disconnected', 'expired', 'deadSwept', 'dropped', 'shutdown'] as const
export type ActivityKind = typeof ACTIVITY_KINDS[number]
export type ActivityCounts = Record<ActivityKind, number>

/** Distinct keys remembered per window for the storm warning; the rest are counted as "other". */
const MAX_KEYS_PER_WINDOW = 1000
const BUSIEST_KEYS = 5

function zeroCounts (): ActivityCounts {
  return { accepted: 0, rejected: 0, tarpitted: 0, disconnected: 0, expired: 0, deadSwept: 0, dropped: 0, shutdown: 0 }
}

/** How an admitted stream started: resumed from history, told to resync, or with no Last-Event-ID. */
export type ResumeOutcome = 'replayed' | 'resync' | 'fresh'

/** What admission holds now: refusals in the tarpit and the storm's widening level (delays × 2^level). */
export interface AdmissionGauges {
  refusalsHeld: number
  stormLevel: number
}

export interface ActivityLogOptions {
  windowMs: number
  /** Attempts per minute (admitted + refused) from which a window is reported as a storm. */
  stormConnectsPerMinute: number
}

/**
 * Counters instead of per-connection log lines: the incident wrote 774K lines in 2.5 days.
 * One summary line per window, and only for windows in which something happened; a window whose
 * connect rate crosses the storm threshold is a warning naming the busiest clients.
 */
export class ActivityLog {
  readonly totals: ActivityCounts = zeroCounts()
  /** Breakdowns kept since start only, for stats() and metrics; `rejected` is their sum. */
  readonly refusals: Record<RefusalReason, number> = { capacity: 0, perKey: 0, pressure: 0, rate: 0, closing: 0, pipelined: 0 }
  readonly resumes: Record<ResumeOutcome, number> = { replayed: 0, resync: 0, fresh: 0 }
  replayedEvents = 0
  broadcasts = 0
  /** Bytes queued on streams that have since closed (the registry adds the open ones'). */
  closedStreamBytes = 0
  /** Set by the plugin once admission exists. */
  admissionGauges: () => AdmissionGauges = () => ({ refusalsHeld: 0, stormLevel: 0 })
  private window: ActivityCounts = zeroCounts()
  private windowPeak = 0
  private attemptsByKey = new Map<string, number>()

  constructor (private readonly options: ActivityLogOptions) {}

  count (kind: ActivityKind): void {
    this.totals[kind]++
    this.window[kind]++
  }

  refused (reason: RefusalReason): void {
    this.count('rejected')
    this.refusals[reason]++
  }

  resumed (outcome: ResumeOutcome, replayedEvents: number): void {
    this.resumes[outcome]++
    this.replayedEvents += replayedEvents
  }

  /** One connection attempt by `key`, admitted or not. */
  attempt (key: string): void {
    const known = this.attemptsByKey.get(key)
    if (known !== undefined) this.attemptsByKey.set(key, known + 1)
    else if (this.attemptsByKey.size < MAX_KEYS_PER_WINDOW) this.attemptsByKey.set(key, 1)
  }

  /** The registry reports its size after each admission so the window knows its peak. */
  observeSize (size: number): void {
    if (size > this.windowPeak) this.windowPeak = size
  }

  /** Writes the summary for the window that just ended (if it saw any activity) and starts a new one. */
  flush (logger: FastifyBaseLogger, current: number): void {
    const w = this.window
    const keys = this.attemptsByKey
    const active = ACTIVITY_KINDS.some((kind) => w[kind] > 0)
    const peak = Math.max(this.windowPeak, current)
    this.window = zeroCounts()
    this.windowPeak = current
    this.attemptsByKey = new Map()
    if (!active) return

    const { windowMs, stormConnectsPerMinute } = this.options
    const connectsPerMinute = Math.round((w.accepted + w.rejected) * 60_000 / windowMs)
    const closes = w.disconnected + w.expired + w.deadSwept + w.dropped + w.shutdown
    let message = `tower-sse: ${w.accepted} connects, ${closes} closes (${w.expired} expired, ${w.deadSwept} swept, ` +
      `${w.dropped} dropped), ${w.rejected} rejected (${w.tarpitted} held); ${current} open, peak ${peak}`
    const summary: Record<string, unknown> = { ...w, current, peak, windowMs, connectsPerMinute }
    if (connectsPerMinute >= stormConnectsPerMinute) {
      const busiest = [...keys.entries()].sort((a, b) => b[1] - a[1]).slice(0, BUSIEST_KEYS)
      summary.storm = { busiestKeys: busiest.map(([key, attempts]) => ({ key, attempts })) }
      message = `tower-sse: connection storm, ${connectsPerMinute} connects/min; busiest: ` +
        `${busiest.map(([key, attempts]) => `${key} ×${attempts}`).join(', ')}. ${message.slice('tower-sse: '.length)}`
    }
    if (w.rejected > 0 || summary.storm !== undefined) logger.warn({ tower_sse: summary }, message)
    else logger.info({ tower_sse: summary }, message)
  }
}
