import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { markdownTable } from '../lib/markdown-table'
import { repoRoot } from '../lib/repo-root'
import { vegaLiteSvg } from '../lib/vega-svg'
import type { BurstResult, CaseResult } from './case'
import { BASELINE, type ContenderName } from '../lib/fanout/contenders'
import type { MetricsAB } from './metrics-ab'
import { metricsNote } from './metrics-note'
import { steadyRate, type FanoutPlan } from './plan'

/** Figures that also get a ratio to the raw baseline with the same stream count. */
export const RATIO_FIELDS = [
  'connectsPerSec', 'broadcastMs', 'p50Ms', 'p99Ms', 'steadyCpuPct',
  'eventsPerSec', 'fastCpuMsPerEvent', 'rssPerClientKB', 'heapPerClientKB'
] as const
type RatioField = typeof RATIO_FIELDS[number]

export interface FanoutRow extends CaseResult {
  /** value ÷ raw's value at the same stream count; null where raw was not measured or is 0. */
  ratios: Record<RatioField, number | null>
}

/** Burst figures that also get a ratio to raw with the same stream count and burst size. */
export const BURST_RATIO_FIELDS = ['deliveriesPerSec', 'p99Ms', 'serverCpuUsPerDelivery'] as const
type BurstRatioField = typeof BURST_RATIO_FIELDS[number]

export interface BurstRow extends BurstResult {
  ratios: Record<BurstRatioField, number | null>
}

export interface FanoutResults {
  benchmark: 'fanout'
  finishedAt: string
  environment: { node: string, platform: string, cpu: string, cores: number, versions: Record<string, string> }
  plan: FanoutPlan
  /** The steady and back-to-back rows (no `burst`), then one row per burst size (with `burst`). */
  rows: Array<FanoutRow | BurstRow>
  /** tower-sse with and without metrics, interleaved in one process (runs with the tower-sse+metrics contender). */
  metricsAB?: MetricsAB[]
  /** Back-to-back events round by round (the rows hold each figure's median), each against its own round's raw loop. */
  backToBackRounds?: BackToBackRound[]
}

/** One contender's back-to-back phase in one round. */
export interface BackToBackRound {
  contender: ContenderName
  clients: number
  /** 1-based. */
  round: number
  fastP99Ms: number
  eventsPerSec: number
  /** ÷ raw's at the same stream count in the same round; null without a raw row. */
  ratios: { fastP99Ms: number | null, eventsPerSec: number | null }
}

/** The back-to-back figures of every case in every round, each against the raw loop of its round. */
export function backToBackRounds (rounds: Array<{ round: number, row: CaseResult }>): BackToBackRound[] {
  return rounds.map(({ round, row }) => {
    const base = rounds.find((r) => r.round === round && r.row.clients === row.clients && r.row.contender === BASELINE)?.row
    return {
      contender: row.contender,
      clients: row.clients,
      round,
      fastP99Ms: row.fastP99Ms,
      eventsPerSec: row.eventsPerSec,
      ratios: ratiosTo(row, base, ['fastP99Ms', 'eventsPerSec'] as const)
    }
  })
}

export function isBurstRow (row: FanoutRow | BurstRow): row is BurstRow {
  return 'burst' in row
}

/** value ÷ the baseline's; null where there is no baseline or it is 0. */
function ratiosTo<F extends string> (row: Record<F, number>, base: Record<F, number> | undefined, fields: readonly F[]): Record<F, number | null> {
  const ratios = {} as Record<F, number | null>
  for (const field of fields) {
    ratios[field] = base === undefined || base[field] === 0 ? null : Number((row[field] / base[field]).toFixed(2))
  }
  return ratios
}

const PACKAGES: Record<ContenderName, string | null> = {
  raw: null,
  'tower-sse': null,
  'tower-sse+metrics': null,
  '@fastify/sse': '@fastify/sse',
  'better-sse': 'better-sse',
  'fastify-sse-v2': 'fastify-sse-v2'
}

function packageVersion (root: string, name: string | null): string {
  const file = name === null ? path.join(root, 'package.json') : path.join(root, 'node_modules', name, 'package.json')
  return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version
}

/** Adds the ratios to raw and the run's environment (versions of every contender and of fastify). */
export function fanoutResults (plan: FanoutPlan, cases: CaseResult[], bursts: BurstResult[], finishedAt = new Date()): FanoutResults {
  const root = repoRoot(__dirname)
  const versions: Record<string, string> = { fastify: packageVersion(root, 'fastify') }
  for (const contender of plan.contenders) {
    if (contender !== BASELINE) versions[contender] = packageVersion(root, PACKAGES[contender])
  }
  const rows = cases.map((row): FanoutRow => {
    const base = cases.find((c) => c.contender === BASELINE && c.clients === row.clients)
    return { ...row, ratios: ratiosTo(row, base, RATIO_FIELDS) }
  })
  const burstRows = bursts.map((row): BurstRow => {
    const base = bursts.find((b) => b.contender === BASELINE && b.clients === row.clients && b.burst === row.burst)
    return { ...row, ratios: ratiosTo(row, base, BURST_RATIO_FIELDS) }
  })
  return {
    benchmark: 'fanout',
    finishedAt: finishedAt.toISOString(),
    environment: {
      node: process.version,
      platform: `${os.platform()} ${os.release()}`,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      versions
    },
    plan,
    rows: [...rows, ...burstRows]
  }
}

function figure<F extends string> (row: { contender: string, ratios: Record<F, number | null> } & Record<F, number>, field: F, digits: number): string {
  const value = row[field].toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
  const ratio = row.ratios[field]
  return ratio === null || row.contender === BASELINE ? value : `${value} (×${ratio.toFixed(2)})`
}

export const steadyRows = (results: FanoutResults): FanoutRow[] =>
  results.rows.filter((row): row is FanoutRow => !isBurstRow(row)).sort((a, b) => a.clients - b.clients)
const burstRows = (results: FanoutResults): BurstRow[] =>
  results.rows.filter(isBurstRow).sort((a, b) => a.clients - b.clients || a.burst - b.burst)

/** The burst table and how it was measured; nothing for results from before the burst phase. */
function burstMarkdown (results: FanoutResults): string[] {
  const rows = burstRows(results)
  if (rows.length === 0) return []
  const { burst } = results.plan
  const table = markdownTable(
    ['contender', 'streams', 'burst', 'deliveries/s', 'p50 ms', 'p99 ms', 'server µs/delivery', 'delivered'],
    rows.map((row) => [
      row.contender,
      row.clients.toLocaleString('en-US'),
      String(row.burst),
      figure(row, 'deliveriesPerSec', 0),
      row.p50Ms.toFixed(2),
      figure(row, 'p99Ms', 2),
      figure(row, 'serverCpuUsPerDelivery', 2),
      `${row.deliveredPct}%`
    ]),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right']
  )
  const source = burst.from === 'callbacks'
    ? 'each event of a burst broadcast from its own `setImmediate` callback, all in one loop phase — the shape of that many notify requests parsed in one poll phase, with `process.nextTick` and microtasks run between them'
    : 'each burst broadcast from one synchronous loop'
  return [
    `#### Bursts: ${burst.sizes.join(', ')} events back to back`,
    '',
    table,
    `- **Bursts**: ${source}; the next burst starts in the turn after the last one's writes, until ${burst.maxEvents} events or ${burst.maxMs / 1000} s of sending (at least one burst).`,
    '- **deliveries/s**: events × streams that arrived, per second from the first send to the last arrival; **p50 / p99 ms**: stamp → arrival over every delivery of the phase; **server µs/delivery**: server CPU over the phase per delivery.',
    ''
  ]
}

/** Back-to-back p99 and events/s in every round, so a median cannot hide one bad round. */
function roundsMarkdown (results: FanoutResults): string[] {
  const rounds = results.backToBackRounds ?? []
  if (results.plan.rounds < 2 || rounds.length === 0) return []
  const numbers = [...new Set(rounds.map((r) => r.round))].sort((a, b) => a - b)
  const cases = [...new Map(rounds.map((r) => [`${r.clients} ${r.contender}`, r])).values()]
  const table = markdownTable(
    ['contender', 'streams', ...numbers.map((n) => `round ${n} p99 ms`), ...numbers.map((n) => `round ${n} events/s`)],
    cases.map(({ contender, clients }) => {
      const of = (n: number): BackToBackRound | undefined => rounds.find((r) => r.round === n && r.contender === contender && r.clients === clients)
      return [
        contender,
        clients.toLocaleString('en-US'),
        ...numbers.map((n) => { const r = of(n); return r === undefined ? '–' : figure(r, 'fastP99Ms', 2) }),
        ...numbers.map((n) => { const r = of(n); return r === undefined ? '–' : figure(r, 'eventsPerSec', 1) })
      ]
    }),
    ['left', 'right', ...numbers.map(() => 'right' as const), ...numbers.map(() => 'right' as const)]
  )
  return [
    '#### Back-to-back events, round by round',
    '',
    table,
    '- (×n) = ÷ the raw loop\'s figure at the same stream count **in the same round**; the table above holds the medians.',
    ''
  ]
}

/** `min–max` of some figures, one decimal. */
function span (values: number[]): string {
  return `${Math.min(...values).toFixed(1)}–${Math.max(...values).toFixed(1)}`
}

/** The results table (markdown) with how it was measured, for results/fanout.md and the README. */
export function fanoutMarkdown (results: FanoutResults): string {
  const { plan, environment: env } = results
  const steady = steadyRows(results)
  const rows = steady
    .map((row) => [
      row.contender,
      row.clients.toLocaleString('en-US'),
      figure(row, 'connectsPerSec', 0),
      figure(row, 'broadcastMs', 2),
      figure(row, 'p50Ms', 2),
      figure(row, 'p99Ms', 2),
      figure(row, 'eventsPerSec', 1),
      figure(row, 'steadyCpuPct', 1),
      figure(row, 'rssPerClientKB', 1),
      figure(row, 'heapPerClientKB', 1),
      `${row.deliveredPct}%`
    ])
  const table = markdownTable(
    ['contender', 'streams', 'admitted/s', 'broadcast ms', 'p50 ms', 'p99 ms', 'max events/s', 'server CPU %', 'RSS KB/stream', 'heap KB/stream', 'delivered'],
    rows,
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right']
  )
  const rates = [...new Set(steady.map((r) => r.clients))]
    .map((clients) => `${steadyRate(plan, clients).toLocaleString('en-US', { maximumFractionDigits: 2 })} events/s with ${clients.toLocaleString('en-US')} streams`)
    .join(', ')
  const versions = Object.entries(env.versions).map(([name, version]) => `${name} ${version}`).join(', ')
  return [
    `### Fanout: one ~150-byte event to every open stream (${plan.name} run, ${results.finishedAt.slice(0, 10)})`,
    '',
    table,
    `Each figure is the median of ${plan.rounds} round${plan.rounds === 1 ? '' : 's'} (delivered: the worst round). ` +
      '(×n) = the figure divided by the raw `node:http` write loop\'s at the same stream count, in the same run: ' +
      'below 1 is better for times, CPU and memory, above 1 is better for admitted/s and events/s.',
    '',
    `- **Steady rate**: ${plan.steady.deliveriesPerSec.toLocaleString('en-US')} deliveries/s at every stream count (${rates}), ${plan.steady.events} events, ` +
      `after ${plan.warmupDeliveries.toLocaleString('en-US')} unmeasured warm-up deliveries.`,
    '- **broadcast ms**: median server time of one broadcast at the steady rate (event stamped → next event-loop turn).',
    '- **p50 / p99 ms**: stamp in the payload → arrival at the client process, every event × every stream of the steady phase.',
    `- **max events/s**: back-to-back broadcasts (at most ${plan.fast.maxEvents} events or ${plan.fast.maxMs / 1000} s of sending), events per second that reached every stream.`,
    '- **server CPU %**: user + system CPU of the server process (% of one core) over the steady phase, read with `process.cpuUsage()` inside it.',
    '- **admitted/s**: the streams are admitted in two halves; the rate of the second, on a server the first has warmed ' +
      '(a storm meets a server that has run). The first, cold half\'s rate is `coldConnectsPerSec` in the JSON.',
    '- **RSS / heap KB per stream**: server growth after `global.gc()` over the second half, idle with every stream open: what one more ' +
      'stream costs, without the one-time costs the first half pays (the path\'s first compilation, the heap\'s first growth).',
    `- Streams held by client processes of up to ${plan.streamsPerProcess.toLocaleString('en-US')} raw sockets each, ${plan.connectConcurrency} connects in flight per process, ` +
      'each from its own loopback address; no heartbeat or max age on any contender.',
    `- Server and client processes share the host's ${env.cores} cores: latency includes the client processes' turn on a core. ` +
      `They only scan for the stamp: ${span(steady.map((r) => r.clientCpuUsPerDelivery))} µs of CPU per delivery, ` +
      `against the servers' ${span(steady.map((r) => r.serverCpuUsPerDelivery))} µs; broadcast ms and CPU are read inside the server.`,
    `- ${env.platform}, ${env.cpu} × ${env.cores}, Node ${env.node}; ${versions}.`,
    ...metricsNote(results),
    '',
    ...roundsMarkdown(results),
    ...burstMarkdown(results)
  ].join('\n')
}

/**
 * p99 latency by stream count, one line per contender; below it, when the run has bursts,
 * deliveries/s by burst size at each stream count (vega-lite, rendered to SVG).
 */
export function fanoutChart (results: FanoutResults): Promise<string> {
  const streams = (clients: number): string => clients.toLocaleString('en-US')
  const rows = steadyRows(results)
  const bursts = burstRows(results)
  const color = { field: 'contender', type: 'nominal', sort: results.plan.contenders, title: 'contender' } as const
  const streamOrder = [...new Set([...rows, ...bursts].map((r) => streams(r.clients)))]
  const latency = {
    title: `p99 delivery latency at ${results.plan.steady.deliveriesPerSec.toLocaleString('en-US')} deliveries/s (lower is better)`,
    width: 420,
    height: 280,
    data: { values: rows.map(({ contender, clients, p99Ms }) => ({ contender, streams: streams(clients), p99Ms })) },
    mark: { type: 'line', point: true },
    encoding: {
      x: { field: 'streams', type: 'ordinal', sort: streamOrder, axis: { labelAngle: 0 }, title: 'open streams' },
      y: { field: 'p99Ms', type: 'quantitative', scale: { type: 'log' }, title: 'p99 latency (ms, log scale)' },
      color
    }
  } as const
  const burstChart = {
    title: 'deliveries/s with events in bursts (higher is better)',
    data: { values: bursts.map(({ contender, clients, burst, deliveriesPerSec }) => ({ contender, streams: streams(clients), burst, deliveriesPerSec })) },
    facet: { column: { field: 'streams', type: 'ordinal', sort: streamOrder, title: 'open streams' } },
    spec: {
      width: 200,
      height: 240,
      mark: { type: 'line', point: true },
      encoding: {
        x: { field: 'burst', type: 'ordinal', axis: { labelAngle: 0 }, title: 'events per burst' },
        y: { field: 'deliveriesPerSec', type: 'quantitative', scale: { type: 'log' }, title: 'deliveries/s (log scale)' },
        color
      }
    }
  } as const
  return vegaLiteSvg({
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    background: 'white',
    vconcat: bursts.length === 0 ? [latency] : [latency, burstChart]
  })
}

/** Writes fanout.json, fanout.md and fanout.svg into `dir`; returns the markdown. */
export async function writeFanoutReport (dir: string, results: FanoutResults): Promise<string> {
  mkdirSync(dir, { recursive: true })
  const markdown = fanoutMarkdown(results)
  writeFileSync(path.join(dir, 'fanout.json'), JSON.stringify(results, null, 2) + '\n')
  writeFileSync(path.join(dir, 'fanout.md'), markdown)
  writeFileSync(path.join(dir, 'fanout.svg'), await fanoutChart(results))
  return markdown
}
