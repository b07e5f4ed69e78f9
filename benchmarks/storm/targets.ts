import type { RejectionResult } from './rejection'
import type { RestartResult } from './restart'
import type { StormRow } from './report'

/** One of the targets, checked against this run's figures. */
export interface TargetCheck {
  target: string
  /** null: not measured in this run (server, population or narrowed run missing). */
  met: boolean | null
  measured: string
}

const CALM_POPULATIONS = ['browser', 'dashboard', 'backoff']
const fmt = (n: number): string => Math.round(n).toLocaleString('en-US')

/** The benchmark targets, as verdicts on this run's rows (figures, not test assertions). */
export function checkTargets (rows: StormRow[], rejection: RejectionResult[], restart: RestartResult[] = []): TargetCheck[] {
  const row = (server: string, population: string): StormRow | undefined =>
    rows.find((r) => r.server === server && r.population === population)
  const checks: TargetCheck[] = []
  const storm = row('legacy', 'hammer')
  checks.push(
    verdict('legacy × hammer: ≥ 49,000 connects/min', storm, (r) => [r.connectsPerMin >= 49_000, `${fmt(r.connectsPerMin)}/min`]),
    verdict('legacy × hammer: thousands of client-side TIME_WAIT', storm, (r) => [r.clientTimeWait >= 1000, `peak ${fmt(r.clientTimeWait)}`]),
    verdict('legacy × hammer: EADDRNOTAVAIL in the narrowed range', storm?.eaddrnotavail === null ? undefined : storm,
      (r) => [(r.eaddrnotavail ?? 0) > 0, `${fmt(r.eaddrnotavail ?? 0)} errors`])
  )
  for (const server of [...new Set(rows.map((r) => r.server))].filter((s) => s.startsWith('tower-sse'))) {
    for (const population of CALM_POPULATIONS) {
      const ours = row(server, population)
      const legacy = row('legacy', population)
      const pair = ours !== undefined && legacy !== undefined ? { ours, legacy } : undefined
      checks.push(
        verdict(`${server} × ${population}: ≤ 1% of legacy's connects/min`, pair, ({ ours, legacy }) =>
          [ours.connectsPerMin <= legacy.connectsPerMin / 100, `${fmt(ours.connectsPerMin)} vs ${fmt(legacy.connectsPerMin)}/min`]),
        verdict(`${server} × ${population}: client TIME_WAIT ≤ 1% of legacy's`, pair, ({ ours, legacy }) =>
          [ours.clientTimeWait <= legacy.clientTimeWait / 100, `peak ${fmt(ours.clientTimeWait)} vs ${fmt(legacy.clientTimeWait)}`]),
        verdict(`${server} × ${population}: zero EADDRNOTAVAIL`, ours?.eaddrnotavail === null ? undefined : ours,
          (r) => [r.eaddrnotavail === 0, `${fmt(r.eaddrnotavail ?? 0)}`]),
        verdict(`${server} × ${population}: ≤ 1 log line per 30 s`, ours, (r) => [r.logLinesPer30s <= 1, `${r.logLinesPer30s.toFixed(1)}`])
      )
    }
  }
  for (const result of rejection.filter((r) => r.server.startsWith('tower-sse'))) {
    checks.push(verdict(`${result.server}: refusals within 10% of the bare 503 route's throughput`, result,
      (r) => [r.throughputRatio >= 0.9, `${(r.throughputRatio * 100).toFixed(0)}% (${fmt(r.requestsPerSec)} req/s)`]))
  }
  for (const result of restart.filter((r) => r.server.startsWith('tower-sse'))) {
    checks.push(verdict(`${result.server} × ${result.population} restart: busiest second of reconnects ≤ 2× the average`, result,
      (r) => [r.busiestOverAverage <= 2 && r.readmitted === r.clients,
        `${r.busiestPerSecond} vs ${r.averagePerSecond.toFixed(1)}/s over ${r.spanSeconds} s (${r.busiestOverAverage.toFixed(2)}×), ${r.readmitted}/${r.clients} back`]))
  }
  return checks
}

function verdict<T> (target: string, subject: T | undefined, judge: (subject: T) => [boolean, string]): TargetCheck {
  if (subject === undefined) return { target, met: null, measured: 'not measured in this run' }
  const [met, measured] = judge(subject)
  return { target, met, measured }
}
