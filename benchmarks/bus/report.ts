import type { TopLevelSpec } from 'vega-lite'
import type { MachineLoad } from '../lib/machine-load'
import { markdownTable } from '../lib/markdown-table'
import { writeResults, type Target } from '../lib/results-files'
import { vegaLiteSvg } from '../lib/vega-svg'
import type { Mark, OpenLoopReply } from './instance'
import { inFlightFor, type BusKind, type BusPlan } from './plan'

export type { Target }

/** The capacity phase of one case, over its measured window (every instance at once). */
export interface CapacityFigures {
  /** The window, in seconds (each instance's own, averaged). */
  windowS: number
  /** Publishes settled published, every instance, and their rate. */
  publishes: number
  publishesPerSec: number
  /** One event written to one stream is one delivery: each instance's events fanned out × its streams. */
  deliveries: number
  deliveriesPerSec: number
  /** The instances' CPU (user + system, process.cpuUsage inside each), in seconds, and as a share of one core. */
  instanceCpuS: number
  instanceCpuPct: number
  /** deliveries ÷ the writes to the streams' sockets in the window: how many events one write carried. */
  eventsPerWrite: number
  /** deliveries ÷ instanceCpuS: what a core of the server side buys. */
  deliveriesPerCoreSecond: number
  /** redis-server's own CPU (INFO used_cpu_user + used_cpu_sys) over the window; null on the memory bus. */
  redisCpuS: number | null
  redisCpuPct: number | null
  /** deliveries ÷ (instanceCpuS + redisCpuS): with Redis's share counted too (the memory bus: as above). */
  deliveriesPerCoreSecondWithRedis: number
  /** The stream readers' CPU over the window (the processes that hold every stream's socket and read it): the clients' share. */
  clientCpuPct: number
  failed: number
  errors: Record<string, number>
}

/** The latency phase at one share of the measured capacity. */
export interface LatencyFigures {
  fraction: number
  /** The scheduled rate, every instance: fraction × capacity publishes/s. */
  offeredPerSec: number
  /** Publishes of the measured part, scheduled and settled published (every instance). */
  measured: number
  published: number
  failed: number
  errors: Record<string, number>
  /** Scheduled time → settled, over every measured publish of every instance. */
  p50Ms: number
  p99Ms: number
  maxMs: number
  /** The most publishes in flight at once on one instance, and sends that left more than 1 ms late. */
  maxInFlight: number
  sentLate: number
  /** The instances' CPU over the measured part, as a share of one core. */
  instanceCpuPct: number
  /** The worst instance's event-loop delay p99 over the phase: how late its loop ran (a busy loop delays every settle). */
  loopDelayP99Ms: number
}

/** One case: a bus, its instance count, streams per instance and event size. */
export interface BusRow {
  bus: BusKind
  instances: number
  streamsPerInstance: number
  bytes: number
  capacity: CapacityFigures
  latency: LatencyFigures[]
  /** After the last phase and its drain: events some stream had not read (stream × event), and streams the instances dropped. */
  undelivered: number
  streamsDropped: number
  /** Streams the instances closed, by why (stats(): busDeaf, dropped for its budget, …); {} when none. */
  streamsClosed: Record<string, number>
}

export interface BusResults {
  finishedAt: string
  durationS: number
  redisVersion: string
  machine: MachineLoad
  /** Why the figures may not be comparable (the run started on a busy machine), or null. */
  machineNote: string | null
  plan: BusPlan
  rows: BusRow[]
  /** Cells that could not be measured (their rows are missing), and why. */
  failures: BusFailure[]
  targets: Target[]
}

export interface BusFailure { bus: BusKind, instances: number, streamsPerInstance: number, error: string }

/** What the runner read at one end of the capacity window: each instance's mark, Redis's CPU, the runner's CPU. */
export interface WindowEnd {
  marks: Mark[]
  /** redis-server's used_cpu_user + used_cpu_sys in seconds; null without Redis. */
  redisCpuS: number | null
  /** The stream readers' CPU (µs, every reader process: the clients' share) and the runner's clock (ms). */
  clientCpuUs: number
  runnerAtMs: number
}

const round = (n: number, digits = 3): number => Number(n.toFixed(digits))

function sumErrors (into: Record<string, number>, errors: Record<string, number>): Record<string, number> {
  for (const [code, n] of Object.entries(errors)) into[code] = (into[code] ?? 0) + n
  return into
}

/** The capacity figures from the readings at the window's two ends (instance i's marks pair up). */
export function capacityFigures (start: WindowEnd, end: WindowEnd): CapacityFigures {
  if (start.marks.length !== end.marks.length || start.marks.length === 0) throw new Error('capacity window: one mark per instance at each end')
  let publishes = 0
  let publishesPerSec = 0
  let deliveries = 0
  let deliveriesPerSec = 0
  let cpuS = 0
  let cpuShare = 0
  let failed = 0
  let windowS = 0
  let writes = 0
  const errors: Record<string, number> = {}
  start.marks.forEach((before, i) => {
    const after = end.marks[i]
    const seconds = (after.atMs - before.atMs) / 1000
    if (!(seconds > 0)) throw new Error(`capacity window of instance ${i}: ${seconds} s`)
    const settled = after.loop.settled - before.loop.settled
    const delivered = (after.events - before.events) * after.streams
    const cpu = (after.cpuUs - before.cpuUs) / 1e6
    publishes += settled
    publishesPerSec += settled / seconds
    deliveries += delivered
    deliveriesPerSec += delivered / seconds
    cpuS += cpu
    writes += after.streamWrites - before.streamWrites
    cpuShare += cpu / seconds
    failed += after.loop.failed - before.loop.failed
    windowS += seconds / start.marks.length
    const failedBefore = before.loop.errors
    for (const [code, n] of Object.entries(after.loop.errors)) {
      const grew = n - (failedBefore[code] ?? 0)
      if (grew > 0) errors[code] = (errors[code] ?? 0) + grew
    }
  })
  const runnerS = (end.runnerAtMs - start.runnerAtMs) / 1000
  const redisCpuS = start.redisCpuS === null || end.redisCpuS === null ? null : end.redisCpuS - start.redisCpuS
  return {
    windowS: round(windowS),
    publishes,
    publishesPerSec: Math.round(publishesPerSec),
    deliveries,
    deliveriesPerSec: Math.round(deliveriesPerSec),
    eventsPerWrite: writes > 0 ? round(deliveries / writes, 2) : 0,
    instanceCpuS: round(cpuS),
    instanceCpuPct: round(cpuShare * 100, 1),
    deliveriesPerCoreSecond: cpuS > 0 ? Math.round(deliveries / cpuS) : 0,
    redisCpuS: redisCpuS === null ? null : round(redisCpuS),
    redisCpuPct: redisCpuS === null ? null : round(redisCpuS / runnerS * 100, 1),
    deliveriesPerCoreSecondWithRedis: cpuS + (redisCpuS ?? 0) > 0 ? Math.round(deliveries / (cpuS + (redisCpuS ?? 0))) : 0,
    clientCpuPct: round((end.clientCpuUs - start.clientCpuUs) / 1e6 / runnerS * 100, 1),
    failed,
    errors
  }
}

/** One share's figures from every instance's open loop (latencies merged by the runner into `quantiles`). */
export function latencyFigures (fraction: number, offeredPerSec: number, replies: readonly OpenLoopReply[], quantiles: { p50Us: number, p99Us: number, maxUs: number }): LatencyFigures {
  const instanceCpuPct = replies.reduce((sum, r) => sum + (r.windowMs > 0 ? r.cpuUs / 1000 / r.windowMs : 0), 0) * 100
  return {
    fraction,
    offeredPerSec: Math.round(offeredPerSec),
    measured: replies.reduce((sum, r) => sum + r.measured, 0),
    published: replies.reduce((sum, r) => sum + r.settled, 0),
    failed: replies.reduce((sum, r) => sum + r.failed, 0),
    errors: replies.reduce((into, r) => sumErrors(into, r.errors), {}),
    p50Ms: round(quantiles.p50Us / 1000),
    p99Ms: round(quantiles.p99Us / 1000),
    maxMs: round(quantiles.maxUs / 1000),
    maxInFlight: Math.max(0, ...replies.map((r) => r.maxInFlight)),
    sentLate: replies.reduce((sum, r) => sum + r.sentLate, 0),
    instanceCpuPct: round(instanceCpuPct, 1),
    loopDelayP99Ms: round(Math.max(0, ...replies.map((r) => r.loopDelayP99Ms)), 1)
  }
}

/** The targets, each a share or a bound. */
export const TARGETS = { redisShareOfMemory: 0.8, p99AtHalfMs: 10, halfFraction: 0.5, atStreams: 1000 } as const

const int = (n: number): string => Math.round(n).toLocaleString('en-US')
const caseName = (r: BusRow): string => `${r.bus === 'memory' ? 'memory' : `Redis ×${r.instances}`}, ${int(r.streamsPerInstance)} streams, ${int(r.bytes)} B`

/** The memory bus's row of the same streams and event size, in the same run. */
export function memoryRowOf (rows: readonly BusRow[], row: BusRow): BusRow | undefined {
  return rows.find((r) => r.bus === 'memory' && r.streamsPerInstance === row.streamsPerInstance && r.bytes === row.bytes)
}

/** A row's deliveries per core-second ÷ the memory bus's in the same case, or null without both. */
export function shareOfMemory (rows: readonly BusRow[], row: BusRow): number | null {
  const memory = memoryRowOf(rows, row)
  if (memory === undefined || memory.capacity.deliveriesPerCoreSecond === 0) return null
  return row.capacity.deliveriesPerCoreSecond / memory.capacity.deliveriesPerCoreSecond
}

/** The targets, judged on this run's own rows: the Redis path's cost per delivery, and p99 at half capacity. */
export function busTargets (rows: readonly BusRow[]): Target[] {
  const targets: Target[] = []
  const shares = rows
    .filter((r) => r.bus === 'redis' && r.streamsPerInstance === TARGETS.atStreams)
    .map((r) => ({ r, share: shareOfMemory(rows, r) }))
    .filter((x): x is { r: BusRow, share: number } => x.share !== null)
  if (shares.length > 0) {
    targets.push({
      target: `the Redis bus ≥ ${TARGETS.redisShareOfMemory}× the memory bus's deliveries per core-second at ${int(TARGETS.atStreams)} streams, every case, same run`,
      measured: shares.map(({ r, share }) => `${r.instances} inst., ${int(r.bytes)} B: ×${share.toFixed(2)}`).join('; '),
      met: shares.every(({ share }) => share >= TARGETS.redisShareOfMemory)
    })
  }
  // A case with no latency at half capacity (its capacity measured nothing) counts against the target.
  if (rows.some((r) => r.latency.some((l) => l.fraction === TARGETS.halfFraction))) {
    const half = rows.map((r) => ({ r, l: r.latency.find((l) => l.fraction === TARGETS.halfFraction) }))
    targets.push({
      target: `publish p99 ≤ ${TARGETS.p99AtHalfMs} ms at ${TARGETS.halfFraction * 100}% of the case's measured capacity (open loop), every case`,
      measured: half.map(({ r, l }) => `${caseName(r)}: ${l === undefined ? 'not measured' : `${l.p99Ms} ms${l.failed > 0 ? ` (${int(l.failed)} failed)` : ''}`}`).join('; '),
      met: half.every(({ l }) => l !== undefined && l.p99Ms <= TARGETS.p99AtHalfMs && l.failed === 0)
    })
  }
  return targets
}

const errorText = (failed: number, errors: Record<string, number>): string =>
  failed === 0 ? '0' : `${int(failed)} (${Object.entries(errors).map(([code, n]) => `${code}: ${n}`).join(', ')})`

export function busMarkdown (results: BusResults): string {
  const { plan, machine } = results
  const out = [`# Bus: deliveries per core-second and publish latency (${plan.name} run, ${results.finishedAt.slice(0, 10)})`, '']
  out.push(`redis-server ${results.redisVersion} on loopback, no persistence. Each instance is its own process (Fastify + tower-sse): the memory bus (one instance, no Redis: the baseline) or the \`redis\` option, 1 to ${Math.max(...plan.instances)} instances on the one redis-server. The streams are raw sockets in a reader process per instance, reading everything and counting the frames. One event written to one stream is one delivery; on the Redis bus every instance delivers every instance's events to its own streams.`, '')
  out.push(`**Capacity** (a closed loop, fine for capacity and only for it): each instance keeps ${plan.bytes.map((b) => `${inFlightFor(plan, b)} \`broadcast()\` calls of ${int(b)} B`).join(' or ')} in flight (at most ${plan.inFlight}, and at most ${int(plan.inFlightBytes / 1024)} KB of event data), sends at most that many in one turn of its event loop and none while its streams' sockets hold more than ${int(plan.backlogBytesPerStream / 1024)} KB unsent per stream, so it publishes as fast as its deliveries keep up. ${plan.warmupMs} ms unmeasured, then ${plan.measureMs} ms measured on every instance at once; at the window's two ends each instance reads its own CPU (\`process.cpuUsage()\`, user + system) and its events fanned out, and the runner reads Redis's \`INFO\` (used_cpu_user + used_cpu_sys) and the reader processes' CPU (the clients' share). Deliveries per core-second = deliveries ÷ the instances' CPU seconds; "with Redis" adds Redis's CPU seconds.`, '')
  out.push(`**Latency** (an open loop): then, for each share of the capacity just measured (${plan.fractions.map((f) => `${f * 100}%`).join(', ')}), every instance publishes its share of that rate on a fixed schedule, not waiting for earlier publishes; a publish is timed from its scheduled send time until it settles (Redis ran the script and this instance's reader delivered the event to its streams; on the memory bus, the call delivered it), so a send that leaves late and the queueing behind it count (the schedule's timer adds up to 1 ms). ${plan.latencyWarmupMs} ms unmeasured, then ${plan.latencyMs} ms measured.`, '')
  out.push(`Machine: ${machine.cpus} CPUs, load average ${machine.loadBefore.join(' / ')} before, ${(machine.loadAfter ?? []).join(' / ')} after (1/5/15 min); Redis, the instances and the reader processes share them.${results.machineNote === null ? '' : ` ${results.machineNote}.`}`, '')
  out.push('## Capacity', '')
  out.push(markdownTable(
    ['bus', 'instances', 'streams each', 'event bytes', 'publishes/s', 'deliveries/s', 'events per write', 'instances\' CPU', 'deliveries per core-second', '× memory', 'Redis CPU', 'with Redis', 'clients\' CPU', 'failed'],
    results.rows.map((r) => {
      const c = r.capacity
      const share = r.bus === 'redis' ? shareOfMemory(results.rows, r) : null
      return [r.bus, String(r.instances), int(r.streamsPerInstance), int(r.bytes), int(c.publishesPerSec), int(c.deliveriesPerSec), String(c.eventsPerWrite), `${c.instanceCpuPct}%`,
        int(c.deliveriesPerCoreSecond), share === null ? '' : `×${share.toFixed(2)}`, c.redisCpuPct === null ? '' : `${c.redisCpuPct}%`,
        r.bus === 'redis' ? int(c.deliveriesPerCoreSecondWithRedis) : '', `${c.clientCpuPct}%`, errorText(c.failed, c.errors)]
    }),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'left']
  ), '')
  out.push('CPU as a share of one core (the instances\' summed). "events per write": deliveries ÷ writes to the streams\' sockets in the window (the plugin writes a stream\'s frames of one turn as one write, so this is how many events a turn carried). "with Redis": deliveries ÷ (instances\' + Redis\'s CPU seconds).', '')
  out.push('## Publish latency, open loop', '')
  const fractions = plan.fractions
  out.push(markdownTable(
    ['bus', 'instances', 'streams each', 'event bytes', 'capacity publishes/s', ...fractions.map((f) => `${f * 100}%: rate, p50 / p99 / max ms`), 'failed', 'undelivered'],
    results.rows.map((r) => [r.bus, String(r.instances), int(r.streamsPerInstance), int(r.bytes), int(r.capacity.publishesPerSec),
      ...fractions.map((f) => {
        const l = r.latency.find((x) => x.fraction === f)
        return l === undefined ? '' : `${int(l.offeredPerSec)}/s: ${l.p50Ms} / ${l.p99Ms} / ${l.maxMs}`
      }),
      errorText(r.latency.reduce((sum, l) => sum + l.failed, 0), r.latency.reduce((into, l) => sumErrors(into, l.errors), {})),
      r.undelivered === 0 && r.streamsDropped === 0 ? '0' : `${int(r.undelivered)}${r.streamsDropped > 0 ? ` (${r.streamsDropped} streams closed: ${Object.entries(r.streamsClosed).map(([why, n]) => `${why} ${n}`).join(', ')})` : ''}`]),
    ['left', 'right', 'right', 'right', 'right', ...fractions.map(() => 'right' as const), 'left', 'right']
  ), '')
  out.push(`Each cell: the rate offered (every instance), then p50 / p99 / max of scheduled send → settled. The instances' event-loop delay p99 (the worst instance, over each share): ${results.rows.map((r) => `${caseName(r)}: ${r.latency.map((l) => `${l.loopDelayP99Ms}`).join(' / ')} ms`).join('; ')}.`, '')
  out.push('"undelivered": events a stream had not read once every phase was over and drained (stream × event); 0 means every stream read every event.', '')
  if (results.failures.length > 0) {
    out.push('## Cells not measured', '', ...results.failures.map((f) => `- ${f.bus} ×${f.instances}, ${int(f.streamsPerInstance)} streams each: ${f.error}`), '')
  }
  if (results.targets.length > 0) {
    out.push('## Targets', '', markdownTable(['target', 'measured (this run)', 'met'], results.targets.map((t) => [t.target, t.measured, t.met ? 'met' : '**NOT met**']), ['left', 'left', 'left']))
  }
  return out.join('\n')
}

export async function busChart (rows: readonly BusRow[]): Promise<string> {
  const values = rows.map((r) => {
    const half = r.latency.find((l) => l.fraction === TARGETS.halfFraction)
    return {
      case: `${int(r.streamsPerInstance)} streams · ${int(r.bytes)} B`,
      setup: r.bus === 'memory' ? 'memory' : `Redis ×${r.instances}`,
      perCoreSecond: r.capacity.deliveriesPerCoreSecond,
      p99AtHalf: half?.p99Ms ?? null
    }
  })
  const bars = (field: string, title: string, symlog = false) => ({
    y: { field: 'case', type: 'nominal' as const, title: null, sort: null },
    yOffset: { field: 'setup', sort: null },
    x: { field, type: 'quantitative' as const, title, ...(symlog ? { scale: { type: 'symlog' as const } } : {}) },
    color: { field: 'setup', type: 'nominal' as const, title: null, sort: null }
  })
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: 'Bus: deliveries per core-second (capacity) and publish p99 at 50% of capacity',
    data: { values },
    hconcat: [
      { width: 300, mark: 'bar', encoding: bars('perCoreSecond', 'deliveries per core-second (instances\' CPU)') },
      { width: 260, mark: 'bar', encoding: bars('p99AtHalf', `publish p99 ms at 50% (target ≤ ${TARGETS.p99AtHalfMs})`, true) }
    ]
  }
  return await vegaLiteSvg(spec)
}

export async function writeBusReport (dir: string, results: BusResults): Promise<string> {
  const markdown = busMarkdown(results)
  writeResults(dir, 'bus', results, markdown, results.rows.length > 0 ? await busChart(results.rows) : null)
  return markdown
}
