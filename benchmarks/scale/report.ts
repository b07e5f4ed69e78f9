import type { TopLevelSpec } from 'vega-lite'
import type { FanoutRow } from '../lib/tower/fanout-phase'
import { markdownTable } from '../lib/markdown-table'
import { writeResults, type Target } from '../lib/results-files'
import { vegaLiteSvg } from '../lib/vega-svg'
import type { MachineLoad } from '../lib/machine-load'
import { atTop, capacity, CORE_BUDGET, DEFAULT_HEARTBEAT_MS, type Capacity } from './capacity'
import type { ScaleRow } from './ladder'
import type { ScalePlan } from './plan'

export interface FileCeiling {
  /** `ulimit -Hn`: the hard limit on open files every process started here inherits. */
  hardLimit: number
  source: string
  /** Streams one process holds under it (plan.ceilingStreams). */
  streams: number
}

export interface ScaleResults {
  finishedAt: string
  durationS: number
  machine: MachineLoad
  /** Why the figures may not be comparable (the run started on a busy machine), or null. */
  machineNote: string | null
  ceiling: FileCeiling
  plan: ScalePlan
  rows: ScaleRow[]
  /** The --workers on Redis phase: total streams, per worker, delivered share (lib/tower/fanout-phase). */
  cluster: FanoutRow | null
  /** From tower-sse's row at the largest count: the inputs of docs/capacity.md's formula. */
  capacity: Capacity | null
  targets: Target[]
  /** Phases that failed, and why. */
  failures: string[]
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US')
const num = (n: number | null): string => n === null ? '–' : String(n)

function capacitySection (results: ScaleResults, cap: Capacity): string[] {
  const perWorker = results.ceiling.streams
  return [
    '## Capacity planning (from the row above at the largest count; see docs/capacity.md)', '',
    markdownTable(['input', 'formula', 'this run'], [
      ['streams per GB of RSS', '1,048,576 KB ÷ rssKBPerStream', int(cap.streamsPerGB)],
      ['deliveries per core-second', 'streams × 1000 ÷ broadcastMs', int(cap.deliveriesPerCoreSecond)],
      ...cap.streamsPerCore.map((s): string[] => [`streams per core at ${s.eventsPerSecond} event/s`, `deliveries per core-second × ${CORE_BUDGET} ÷ ${s.eventsPerSecond}`, int(s.streams)]),
      ['heartbeat sweep at this size', 'idle CPU ÷ heartbeat intervals in the window', `${cap.heartbeatCpuMs} ms`],
      [`heartbeat share of a core at the default ${DEFAULT_HEARTBEAT_MS / 1000} s`, 'sweep ms ÷ heartbeatMs', `${(cap.heartbeatCoreShare * 100).toFixed(3)}%`],
      ['streams per process', '(ulimit -Hn − 64) rounded down to 1,000', int(perWorker)]
    ], ['left', 'left', 'right']), '',
    `A worker more once streams exceed ${int(perWorker)} per process (files) or events/s × streams exceed ${int(cap.deliveriesPerCoreSecond * CORE_BUDGET)} deliveries/s per worker (${CORE_BUDGET * 100}% of a core); an instance more once the workers outnumber the cores or their RSS (streams ÷ ${int(cap.streamsPerGB)} streams per GB) outgrows the memory.`, ''
  ]
}

export function scaleMarkdown (results: ScaleResults): string {
  const { machine, ceiling, plan } = results
  const out: string[] = [`# bench:scale (${plan.name} run, ${results.finishedAt}, ${results.durationS.toFixed(0)} s)`, '']
  out.push(`Machine: ${machine.cpus} CPUs, load average ${machine.loadBefore.join(' / ')} before, ${(machine.loadAfter ?? []).join(' / ')} after (1/5/15 min). Ceiling: ${ceiling.source}.${results.machineNote === null ? '' : ` ${results.machineNote}.`}`, '')
  out.push(`One server process per contender grows through the steps (client processes of ≤ ${int(plan.fanout.streamsPerProcess)} raw-socket streams added at each, each from its own loopback address); both run a heartbeat every ${plan.heartbeatMs} ms. At each step: heap and RSS after full GCs, minus before the first stream; ${plan.idleMs / 1000} s idle (event-loop delay by perf_hooks monitorEventLoopDelay in the server; CPU per heartbeat interval); ${plan.statsCalls} stats() calls and ${plan.scrapes} GET /metrics (medians); then ${plan.broadcasts} broadcasts ${plan.periodMs} ms apart (server time to the next turn; delivery p99 at the clients).`, '')
  out.push(markdownTable(
    ['contender', 'streams', 'heap KB/stream', 'RSS KB/stream', 'admit µs/stream', 'broadcast ms', 'p99 ms', 'idle loop p99 ms', 'CPU per heartbeat ms', 'stats() ms', 'GET /metrics ms', 'delivered'],
    results.rows.map((r) => [r.contender, int(r.streams), String(r.heapKBPerStream), String(r.rssKBPerStream), String(r.admitUsPerStream), String(r.broadcastMs), String(r.p99Ms), String(r.loopDelayP99Ms), String(r.heartbeatCpuMs), num(r.statsMs), num(r.metricsMs), `${r.deliveredPct}%`]),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right']
  ), '')
  if (results.cluster !== null) {
    const c = results.cluster
    out.push(`## ${c.instances} workers on Redis (Tower as npm start runs it)`, '', `${int(c.streams)} streams (${c.perInstance.map(int).join(' / ')} per worker), ${int(c.admitted)} admitted; ${c.events} broadcasts by POST /api/notify: ${(c.share * 100).toFixed(3)}% delivered, p50 ${c.p50Ms.toFixed(1)} ms, p99 ${c.p99Ms.toFixed(1)} ms.`, '')
  }
  if (results.capacity !== null) out.push(...capacitySection(results, results.capacity))
  if (results.failures.length > 0) out.push('## Phases that failed', '', ...results.failures.map((f) => `- ${f}`), '')
  out.push('## Targets', '', markdownTable(['target', 'measured (this run)', 'met'], results.targets.map((t) => [t.target, t.measured, t.met ? 'met' : '**NOT met**']), ['left', 'left', 'left']))
  return out.join('\n')
}

export async function scaleChart (rows: ScaleRow[]): Promise<string> {
  const series: Array<[string, (r: ScaleRow) => number]> = [
    ['heap KB per stream', (r) => r.heapKBPerStream], ['RSS KB per stream', (r) => r.rssKBPerStream],
    ['broadcast ms', (r) => r.broadcastMs], ['idle loop delay p99 ms', (r) => r.loopDelayP99Ms]
  ]
  const values = rows.flatMap((r) => series.map(([name, pick]) => ({ contender: r.contender, streams: r.streams, series: name, value: pick(r) })))
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: 'One process, 1,000 streams up to the file ceiling',
    data: { values },
    facet: { field: 'series', type: 'nominal', title: null, sort: series.map(([name]) => name) },
    columns: 2,
    spec: {
      width: 260,
      height: 150,
      mark: { type: 'line', point: true },
      encoding: {
        x: { field: 'streams', type: 'quantitative', title: 'streams' },
        y: { field: 'value', type: 'quantitative', title: null },
        color: { field: 'contender', type: 'nominal', title: null }
      }
    },
    resolve: { scale: { y: 'independent' } }
  }
  return await vegaLiteSvg(spec)
}

/** The capacity inputs come from the plugin's row at the largest count both contenders reached. */
export function capacityOf (rows: ScaleRow[], contender: string, baseline: string): Capacity | null {
  const top = atTop(rows, contender, baseline)
  return top === null ? null : capacity(top.ours)
}

export async function writeScaleReport (dir: string, results: ScaleResults): Promise<string> {
  const markdown = scaleMarkdown(results)
  writeResults(dir, 'scale', results, markdown, results.rows.length > 0 ? await scaleChart(results.rows) : null)
  return markdown
}
