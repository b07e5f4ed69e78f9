import { metricsABLine } from './metrics-ab'
import { steadyRows, type FanoutResults } from './report'
import { SCRAPES } from '../lib/fanout/scrape'

const streams = (n: number): string => n.toLocaleString('en-US')

/**
 * The lines under the fan-out table about metrics: what a /metrics scrape took, and the
 * broadcast time with metrics on divided by tower-sse's without, same run, same stream count.
 */
export function metricsNote (results: FanoutResults): string[] {
  const rows = steadyRows(results)
  return [...rows.filter((row) => row.scrapeMs !== null).map((row) => {
    const off = rows.find((r) => r.contender === 'tower-sse' && r.clients === row.clients)
    const ratio = off === undefined || off.broadcastMs === 0 ? '' : `; broadcast ms with metrics ÷ without: ×${(row.broadcastMs / off.broadcastMs).toFixed(3)}`
    return `- **${row.contender}** at ${streams(row.clients)} streams: GET /metrics answered in ${String(row.scrapeMs)} ms ` +
      `(median of ${SCRAPES}, max ${String(row.scrapeMaxMs)} ms)${ratio}.`
  }), ...(results.metricsAB ?? []).map(metricsABLine)]
}
