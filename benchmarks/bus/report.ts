import type { TopLevelSpec } from 'vega-lite'
import type { MachineLoad } from '../lib/machine-load'
import { markdownTable } from '../lib/markdown-table'
import { writeResults } from '../lib/results-files'
import { vegaLiteSvg } from '../lib/vega-svg'
import type { BusPlan, PublishMode } from './plan'

/** One measurement: `instances` publishing at once on one Redis, each with its streams open. */
export interface BusRow {
  instances: number
  streamsPerInstance: number
  bytes: number
  mode: PublishMode
  /** Publishes that settled published, over every instance, and those that failed. */
  published: number
  failed: number
  errors: Record<string, number>
  publishesPerSec: number
  /** broadcast() called → settled, over every publish of every instance. */
  p50Ms: number
  p99Ms: number
  maxMs: number
  /** Bytes the runner's streams read in the measurement, per stream (every stream got the events). */
  streamBytes: number
}

export interface Target { target: string, measured: string, met: boolean }

export interface BusResults {
  finishedAt: string
  durationS: number
  redisVersion: string
  machine: MachineLoad
  /** Why the figures may not be comparable (the run started on a busy machine), or null. */
  machineNote: string | null
  plan: BusPlan
  rows: BusRow[]
  targets: Target[]
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US')
const sameCase = (a: BusRow, b: BusRow): boolean => a.instances === b.instances && a.streamsPerInstance === b.streamsPerInstance && a.bytes === b.bytes

/** Batched publishes/s ÷ unbatched in the same case of the same run, or null without both. */
export function batchRatio (rows: readonly BusRow[], row: BusRow): number | null {
  const unbatched = rows.find((r) => r.mode === 'unbatched' && sameCase(r, row))
  const batched = rows.find((r) => r.mode === 'batched' && sameCase(r, row))
  if (unbatched === undefined || batched === undefined || unbatched.publishesPerSec === 0) return null
  return batched.publishesPerSec / unbatched.publishesPerSec
}

/** The issue's targets, judged on this run's rows: batching ≥ 3×, and p99 ≤ 20 ms at 1,000 streams batched. */
export function busTargets (rows: readonly BusRow[]): Target[] {
  const targets: Target[] = []
  const ratios = rows.filter((r) => r.mode === 'batched').map((r) => ({ r, ratio: batchRatio(rows, r) })).filter((x) => x.ratio !== null) as Array<{ r: BusRow, ratio: number }>
  if (ratios.length > 0) {
    targets.push({
      target: 'batched ≥ 3× the unbatched publishes/s, every case, same run',
      measured: ratios.map(({ r, ratio }) => `${r.instances}×${int(r.streamsPerInstance)}, ${int(r.bytes)} B: ×${ratio.toFixed(2)}`).join('; '),
      met: ratios.every(({ ratio }) => ratio >= 3)
    })
  }
  const large = rows.filter((r) => r.mode === 'batched' && r.streamsPerInstance >= 1000)
  if (large.length > 0) {
    targets.push({
      target: 'publish p99 ≤ 20 ms at 1,000 streams (batched)',
      measured: large.map((r) => `${r.instances}×${int(r.streamsPerInstance)}, ${int(r.bytes)} B: ${r.p99Ms} ms`).join('; '),
      met: large.every((r) => r.p99Ms <= 20)
    })
  }
  return targets
}

export function busMarkdown (results: BusResults): string {
  const { plan, machine } = results
  const out = [`# Bus: publishes through one Redis (${plan.name} run, ${results.finishedAt.slice(0, 10)})`, '']
  out.push(`redis-server ${results.redisVersion} on loopback, no persistence. Each instance is its own process (Fastify + tower-sse, \`redis\` option) and keeps ${plan.inFlight} \`broadcast()\` calls in flight: a closed loop, the next sent as one settles. A publish is timed from the call until it settles (Redis ran the script and this instance's reader delivered the event to its streams). ${plan.warmupMs} ms of unmeasured publishing, then ${plan.measureMs} ms measured, every instance at once. \`unbatched\`: \`maxPublishBatch: 1\`, one script call per publish; \`batched\`: the publishes of one turn in one pipeline (\`maxPublishBatch: 100\`, the default). The streams are raw sockets held by the runner, reading everything.`, '')
  out.push(`Machine: ${machine.cpus} CPUs, load average ${machine.loadBefore.join(' / ')} before, ${(machine.loadAfter ?? []).join(' / ')} after (1/5/15 min); Redis, the instances and the runner share them.${results.machineNote === null ? '' : ` ${results.machineNote}.`}`, '')
  out.push(markdownTable(
    ['instances', 'streams each', 'event bytes', 'mode', 'publishes/s', '× unbatched', 'p50 ms', 'p99 ms', 'max ms', 'failed', 'bytes read per stream'],
    results.rows.map((r) => {
      const ratio = r.mode === 'batched' ? batchRatio(results.rows, r) : null
      return [String(r.instances), int(r.streamsPerInstance), int(r.bytes), r.mode, int(r.publishesPerSec), ratio === null ? '' : `×${ratio.toFixed(2)}`,
        String(r.p50Ms), String(r.p99Ms), String(r.maxMs), r.failed === 0 ? '0' : `${int(r.failed)} (${Object.entries(r.errors).map(([code, n]) => `${code}: ${n}`).join(', ')})`, int(r.streamBytes)]
    }),
    ['right', 'right', 'right', 'left', 'right', 'right', 'right', 'right', 'right', 'left', 'right']
  ), '')
  if (results.targets.length > 0) {
    out.push('## Targets', '', markdownTable(['target', 'measured (this run)', 'met'], results.targets.map((t) => [t.target, t.measured, t.met ? 'met' : '**NOT met**']), ['left', 'left', 'left']))
  }
  return out.join('\n')
}

export async function busChart (rows: readonly BusRow[]): Promise<string> {
  const values = rows.map((r) => ({ case: `${r.instances} inst · ${int(r.streamsPerInstance)} streams · ${int(r.bytes)} B`, mode: r.mode, publishesPerSec: r.publishesPerSec }))
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: 'Publishes per second through one Redis',
    data: { values },
    width: 420,
    mark: 'bar',
    encoding: {
      y: { field: 'case', type: 'nominal', title: null, sort: null },
      yOffset: { field: 'mode' },
      x: { field: 'publishesPerSec', type: 'quantitative', title: 'publishes/s (all instances)' },
      color: { field: 'mode', type: 'nominal', title: null }
    }
  }
  return await vegaLiteSvg(spec)
}

export async function writeBusReport (dir: string, results: BusResults): Promise<string> {
  const markdown = busMarkdown(results)
  writeResults(dir, 'bus', results, markdown, results.rows.length > 0 ? await busChart(results.rows) : null)
  return markdown
}
