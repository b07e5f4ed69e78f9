import { markdownTable } from '../lib/markdown-table'
import type { StormPlan } from './plan'
import type { RefusalMeasurement, RejectionResult } from './rejection'
import type { RestartResult } from './restart'
import type { ScenarioResult } from './scenario'
import type { TargetCheck } from './targets'

/** One server × population of the storm matrix: the main run plus its narrowed-port run. */
export interface StormRow extends ScenarioResult {
  /** EADDRNOTAVAIL the clients saw with ~1,000 ephemeral ports; null when that run was skipped. */
  eaddrnotavail: number | null
  /** Server-counted connects/min in that run, where ports ran short. */
  narrowedConnectsPerMin: number | null
  /** Why that run failed, or null. */
  narrowedError: string | null
}

/** Everything storm.json holds; storm.md and the chart are drawn from it. */
export interface StormReport {
  generatedAt: string
  command: string
  environment: { node: string, cpus: number, platform: string }
  /** The plan, less what has its own field (servers, skipped) and where the files went. */
  settings: Omit<StormPlan, 'servers' | 'skipped' | 'outDir'>
  servers: Array<{ name: string, summary: string, options: Record<string, unknown>, capacity: number }>
  skipped: Array<{ server: string, reason: string }>
  narrowedSkippedBecause: string | null
  rows: StormRow[]
  rejection: RejectionResult[]
  restart: RestartResult[]
  targets: TargetCheck[]
  failures: Array<{ what: string, error: string }>
  /** Reasons to distrust the figures (code that changed under the run). */
  warnings: string[]
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US')
const peakEnd = (peak: number, end: number): string => `${int(peak)} / ${int(end)}`

/** The storm matrix as a markdown table, one row per server × population. */
export function stormTable (rows: StormRow[]): string {
  return markdownTable(
    ['server', 'population', 'clients / cap', 'connects/min (server)', 'connects/min (clients)', 'admitted', 'rejected',
      'evicted', 'expired', 'client TIME_WAIT peak / end', 'server TIME_WAIT peak / end', 'EADDRNOTAVAIL (1,000 ports)',
      'log lines (per 30 s)', 'RSS MB', 'ELU'],
    rows.map((r) => [
      r.server, r.population, `${r.clients} / ${r.capacity}`, int(r.connectsPerMin), int(r.clientConnectsPerMin),
      int(r.admitted), int(r.rejected), int(r.evicted), int(r.expired),
      peakEnd(r.clientTimeWait, r.clientTimeWaitEnd), peakEnd(r.serverTimeWait, r.serverTimeWaitEnd),
      r.eaddrnotavail !== null ? int(r.eaddrnotavail) : r.narrowedError === null ? 'skipped' : 'failed',
      `${int(r.logLines)} (${r.logLinesPer30s.toFixed(1)})`, r.rssMB.toFixed(0), `${(r.elu * 100).toFixed(0)}%`
    ]),
    ['left', 'left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right']
  )
}

/** The refusal path: each full server against the bare 503 route measured right before it. */
export function rejectionTable (results: RejectionResult[]): string {
  const answers = (r: RefusalMeasurement): string =>
    Object.entries(r.statusCodes).map(([code, count]) => `${int(count)}× ${code}`).join(', ') + (r.errors > 0 ? `, ${int(r.errors)} errors` : '')
  return markdownTable(
    ['server', 'req/s', 'p99 ms', 'bare 503 req/s', 'bare 503 p99 ms', 'req/s vs bare', 'p99 vs bare', 'answers'],
    results.map((r) => [
      r.server, int(r.requestsPerSec), int(r.p99Ms), int(r.bare.requestsPerSec), int(r.bare.p99Ms),
      `${(r.throughputRatio * 100).toFixed(0)}%`, `${r.p99Ratio.toFixed(2)}×`, answers(r)
    ]),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'left']
  )
}

/** The restart runs: how the clients of a full server came back to its successor. */
export function restartTable (results: RestartResult[]): string {
  return markdownTable(
    ['server', 'population', 'connected before', 'close() ms', 'readmitted', 'reconnects per second', 'busiest / average'],
    results.map((r) => [
      r.server, r.population, `${int(r.connectedBefore)} / ${int(r.clients)}`, int(r.closeMs), int(r.readmitted),
      r.perSecond.join(' '), `${int(r.busiestPerSecond)} / ${r.averagePerSecond.toFixed(1)} = ${r.busiestOverAverage.toFixed(2)}×`
    ]),
    ['left', 'left', 'right', 'right', 'right', 'left', 'right']
  )
}

/** storm.md: the tables, the target verdicts and what the columns mean. */
export function stormMarkdown (report: StormReport): string {
  const s = report.settings
  const mark = (met: boolean | null): string => met === null ? '–' : met ? 'met' : 'NOT met'
  const parts = [
    '# Storm benchmark\n',
    `\`${report.command}\` · ${report.generatedAt} · Node ${report.environment.node}, ${report.environment.cpus} CPUs${s.quick ? ' · **--quick: smoke run, figures not comparable**' : ''}\n`,
    `Each server runs in its own process on loopback; each population in another. Clients: ${s.clients ?? `${s.clientsPerCap} × each server's cap`}. ` +
      `Clients start together; after a ${s.warmupSeconds} s warm-up, rates are measured over ${s.durationSeconds} s. ` +
      'TIME_WAIT is sampled each second on the server\'s port (peak over the run / at the end of the window); ' +
      (report.narrowedSkippedBecause === null
        ? `EADDRNOTAVAIL comes from a separate ${s.narrowedSeconds} s run in a private network namespace with ports 40000–40999 ` +
          'and tcp_tw_reuse=0 (Linux reuses TIME_WAIT ports for loopback connects by default, for no other interface).\n'
        : `the narrowed-port runs were skipped: ${report.narrowedSkippedBecause}.\n`),
    stormTable(report.rows)
  ]
  if (report.rejection.length > 0) {
    parts.push(
      `\n## Refusal path\n\n${s.rejectionConnections} Node http loops (a new connection per request), ${s.rejectionSeconds} s, every stream already taken; ` +
        'each server is compared with a bare Fastify route measured right before it, answering 503 on the same terms as ' +
        'tower-sse (Retry-After, JSON body, `Connection: close`). During a storm tower-sse holds refusals (its tarpit), ' +
        'which caps a flood by design; the variant without it shows what a refusal itself costs.\n',
      rejectionTable(report.rejection)
    )
  }
  if (report.restart.length > 0) {
    parts.push(
      '\n## Restart\n\nEvery stream taken (clients = cap), then the server shuts down the way it does (tower-sse: staged drain ' +
        'over drainMs with a jittered retry: each) and a new server process takes over the port and counts connects in each of ' +
        `${s.restartSeconds} seconds. Busiest / average is over the seconds from the first reconnect to the last.\n`,
      restartTable(report.restart)
    )
  }
  parts.push(
    '\n## Targets\n',
    markdownTable(['target', 'verdict', 'measured'], report.targets.map((t) => [t.target, mark(t.met), t.measured]))
  )
  const notes = [
    ...report.warnings.map((w) => `- WARNING: ${w}`),
    ...report.skipped.map((s) => `- server ${s.server} skipped: ${s.reason}`),
    ...report.rows.filter((r) => r.narrowedError !== null).map((r) => `- narrowed run of ${r.server} × ${r.population} failed: ${r.narrowedError}`),
    ...report.failures.map((f) => `- FAILED ${f.what}: ${f.error}`)
  ]
  if (notes.length > 0) parts.push('\n## Warnings, skipped and failed\n', notes.join('\n') + '\n')
  parts.push(
    '\n## Columns\n',
    [
      '- connects/min: requests to the events route per minute in the window, counted by the server and by the clients (for autocannon: the TCP connections it opened, one per request).',
      '- admitted / rejected / evicted / expired: what the server did with streams during the window.',
      '- client TIME_WAIT: sockets whose local port is a client\'s ephemeral port (they block ports on the client host); server TIME_WAIT: local port is the server\'s.',
      '- log lines: lines the server logged from listening to shutdown; in brackets per started 30 s of its life.',
      '- RSS: the server\'s peak resident set; ELU: its event-loop utilisation over the window.'
    ].join('\n') + '\n'
  )
  return parts.join('\n')
}
