import type { FastifyBaseLogger } from 'fastify'
import { ACTIVITY_KINDS, CLOSE_REASONS } from './vocabulary'
import type { StreamStats } from './stats'
import { integer, MAX_TIMER_MS } from '../shared/option-rules'

const BUSIEST_KEYS = 5
/**
 * Attempts per minute (admitted + refused) from which a window is reported as a storm, naming its
 * busiest clients: ~17 a second is far past any steady reconnecting, and far below the 49K a
 * minute of the storm this plugin was written against.
 */
export const STORM_CONNECTS_PER_MINUTE = 1000

/** The one summary line's window, in ms. */
export const LOG_INTERVAL_DEFAULT_MS = 30_000

export function parseLogInterval (value: unknown): number {
  return integer('logIntervalMs', value, LOG_INTERVAL_DEFAULT_MS, { min: 1, max: MAX_TIMER_MS })
}

/**
 * Counters instead of per-connection log lines: under a reconnect storm a line per connection is
 * hundreds of thousands of lines a day, and the one that matters is lost among them. One summary line per window (read from the stats owner), and only for windows in which
 * something happened; a window whose connect rate crosses the storm threshold is a warning naming
 * the busiest clients.
 */
export class ActivityLog {
  constructor (private readonly stats: StreamStats, private readonly windowMs: number) {}

  /** Writes the summary for the window that just ended (if it saw any activity) and starts a new one. */
  flush (logger: FastifyBaseLogger, current: number): void {
    const { counts: w, peak, attemptsByKey: keys } = this.stats.takeWindow(current)
    if (!ACTIVITY_KINDS.some((kind) => w[kind] > 0)) return

    const { windowMs } = this
    const connectsPerMinute = Math.round((w.accepted + w.rejected) * 60_000 / windowMs)
    const closes = CLOSE_REASONS.reduce((sum, cause) => sum + w[cause], 0)
    let message = `tower-sse: ${w.accepted} connects, ${closes} closes (${w.expired} expired, ${w.deadSwept} swept, ` +
      `${w.dropped} dropped), ${w.rejected} rejected (${w.tarpitted} held); ${current} open, peak ${peak}`
    const summary: Record<string, unknown> = { ...w, current, peak, windowMs, connectsPerMinute }
    if (connectsPerMinute >= STORM_CONNECTS_PER_MINUTE) {
      const busiest = [...keys.entries()].sort((a, b) => b[1] - a[1]).slice(0, BUSIEST_KEYS)
      summary.storm = { busiestKeys: busiest.map(([key, attempts]) => ({ key, attempts })) }
      message = `tower-sse: connection storm, ${connectsPerMinute} connects/min; busiest: ` +
        `${busiest.map(([key, attempts]) => `${key} ×${attempts}`).join(', ')}. ${message.slice('tower-sse: '.length)}`
    }
    if (w.rejected > 0 || summary.storm !== undefined) logger.warn({ tower_sse: summary }, message)
    else logger.info({ tower_sse: summary }, message)
  }
}
