import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import type { TopLevelSpec } from 'vega-lite'
import { markdownTable } from '../lib/markdown-table'
import { writeResults, type Target } from '../lib/results-files'
import { vegaLiteSvg } from '../lib/vega-svg'
import type { MachineLoad } from '../lib/machine-load'
import type { SoakPlan } from './plan'
import { counterIncrease, lagWindows, quarters, type LagWindow, type QuarterCheck, type Sample } from './samples'
import type { PosterStats } from './post-window'
import type { SoakTraffic } from './soak'

/** The loop-lag target: p99 at most this in every window of sampleEveryMs. */
export const LOOP_LAG_P99_MS = 50
/** A window longer than this share of sampleEveryMs (a scrape failed before it) cannot be judged as one 10 s window. */
const WINDOW_SLACK = 1.5

/** One soak run as soak.json holds it: the issue's figures first, then what they come from. */
export interface SoakRun {
  workers: number
  bus: 'memory' | 'redis'
  finishedAt: string
  machine: MachineLoad
  /** Why the figures may not be comparable (the run started on a busy machine), or null. */
  machineNote: string | null
  durationS: number
  /** Connection attempts Tower counted (admitted + refused), counters summed over restarts. */
  attempts: number
  /** Notifies Tower accepted (answered 200): each one event published to every stream. */
  publishes: number
  lost: number
  duplicated: number
  outOfOrder: number
  /** Steady clients that got a resync (the Redis restart may cost one each). */
  resyncedClients: number
  /**
   * The most accepted events the furthest-behind accounted client had yet to receive, at any
   * sample: a client behind by more than the history resyncs when its stream ends, as it must.
   */
  clientLagMaxEvents: number
  /**
   * The most client-side TIME_WAIT sockets on Tower's port at any sample while the clients were
   * there, leaving out the TIME_WAIT_S after each storm wave's stop: stopping autocannon aborts the
   * connections Tower still held (tarpitted refusals, its admitted streams), so those are the
   * bench's closes, counted apart in clientTimeWaitAfterWaveStops.
   */
  clientTimeWait: number
  clientTimeWaitAfterWaveStops: number
  /** Lines Tower printed over its life (start to stop, `towerLifeS`), and what the summary-log rule allows (see logBudget). */
  logLines: number
  /** Tower's lines as printed (the first 5,000), for reading what the log target counted. */
  towerLog: readonly string[]
  logBudget: number
  towerLifeS: number
  fdsBaseline: number
  fdsAfter: number
  heap: QuarterCheck
  rss: QuarterCheck
  /** The worst window's p99 (loopLag.worst), kept for older readers of soak.json. */
  loopLagP99MaxMs: number
  /** Event-loop lag p99 judged per window: every window's, the worst, those over the target and those too long to judge. */
  loopLag: { windows: LagWindow[], worst: LagWindow | null, over: LagWindow[], unjudged: LagWindow[] }
  samples: SoakTraffic['samples']
  traffic: Omit<SoakTraffic, 'samples' | 'durationS' | 'fdsBaseline' | 'fdsAfter'>
  plan: SoakPlan
  targets: Target[]
}

export interface SoakResults { runs: SoakRun[] }

/**
 * The lines Tower may print over `lifeS` seconds (its start to its stop) by the summary-log rule:
 * per serving process, one summary per logIntervalMs window (a window begun counts, the last one
 * flushed at stop), its "listening" line and its stop line. A cluster's primary adds its own start
 * and stop lines and, per worker, "worker started" and "worker exited". The Redis run's incidents
 * add each worker's "bus down", "cannot prove continuity" (Redis came back empty) and "bus up
 * again", and for the killed worker "died", "started" and its replacement's "listening".
 */
export function logBudget (plan: SoakPlan, lifeS: number): number {
  const windows = Math.ceil(lifeS * 1000 / plan.tower.logIntervalMs)
  const perWorker = windows + 2
  if (plan.workers === 1) return perWorker
  const primary = 2 + 2 * plan.workers
  const incidents = 3 * plan.workers + 3
  return plan.workers * perWorker + primary + incidents
}

/** Linux keeps a TIME_WAIT socket 60 s (TCP_TIMEWAIT_LEN, fixed in the kernel). */
export const TIME_WAIT_S = 60

/**
 * Whether a sample at `t` s may still see the TIME_WAIT sockets of a wave's stop: from the moment the
 * wave's time is up (the bench starts aborting its connections) to TIME_WAIT_S after it was recorded
 * stopped (the last of them closed).
 */
export function afterWaveStop (t: number, stops: ReadonlyArray<{ from: number, to: number }>): boolean {
  return stops.some(({ from, to }) => t >= from && t < to + TIME_WAIT_S)
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US')
const mb = (bytes: number): string => (bytes / 1024 / 1024).toFixed(1)
const span = (w: LagWindow): string => `${w.fromS.toFixed(0)}–${w.toS.toFixed(0)} s`

/** The loop-lag windows of a run, judged: each against the target, and each short enough to be one window. */
export function judgeLoopLag (samples: readonly Sample[], sampleEveryMs: number): SoakRun['loopLag'] {
  const windows = lagWindows(samples)
  const worst = windows.reduce<LagWindow | null>((a, w) => a === null || w.p99Ms > a.p99Ms ? w : a, null)
  return {
    windows,
    worst,
    over: windows.filter((w) => w.p99Ms > LOOP_LAG_P99_MS),
    unjudged: windows.filter((w) => w.toS - w.fromS > WINDOW_SLACK * sampleEveryMs / 1000)
  }
}

function loopLagTarget (run: Omit<SoakRun, 'targets'>): Target {
  const { windows, worst, over, unjudged } = run.loopLag
  const every = `${run.plan.sampleEveryMs / 1000} s`
  const parts = worst === null
    ? ['no window sampled']
    : [
        over.length === 0 ? `all ${windows.length} windows ≤ ${LOOP_LAG_P99_MS} ms` : `${over.length} of ${windows.length} windows over ${LOOP_LAG_P99_MS} ms`,
        `worst ${worst.p99Ms.toFixed(1)} ms (${span(worst)})`,
        ...(unjudged.length === 0 ? [] : [`${unjudged.length} window(s) longer than ${WINDOW_SLACK}× ${every}, a scrape missing before them, not judged as one: ${unjudged.slice(0, 5).map(span).join(', ')}`])
      ]
  return {
    target: `event-loop lag p99 ≤ ${LOOP_LAG_P99_MS} ms in every ${every} window`,
    measured: parts.join('; '),
    met: worst !== null && over.length === 0 && unjudged.length === 0
  }
}

/** The issue's soak targets, each judged on this run's own figures. */
export function soakTargets (run: Omit<SoakRun, 'targets'>): Target[] {
  const minutes = run.durationS / 60
  const failedWaves = run.traffic.waves.filter((w) => w.failed !== null).length
  const redis = run.workers > 1
  return [
    { target: '≥ 30 minutes', measured: `${minutes.toFixed(1)} min`, met: minutes >= 30 },
    {
      target: '≥ 500,000 connection attempts (admitted + refused)',
      measured: int(run.attempts) + (failedWaves === 0 ? '' : ` (${failedWaves} storm wave(s) failed to start)`),
      met: run.attempts >= 500_000
    },
    { target: '≥ 1,000,000 publishes', measured: int(run.publishes), met: run.publishes >= 1_000_000 },
    { target: 'heap used: mean of the last quarter ≤ 1.10× the second quarter\'s', measured: `${mb(run.heap.last)} ÷ ${mb(run.heap.second)} MB = ${run.heap.ratio.toFixed(3)}×`, met: run.heap.ratio <= 1.1 },
    { target: 'RSS: mean of the last quarter ≤ 1.10× the second quarter\'s', measured: `${mb(run.rss.last)} ÷ ${mb(run.rss.second)} MB = ${run.rss.ratio.toFixed(3)}×`, met: run.rss.ratio <= 1.1 },
    { target: 'open files back to the baseline (±10) after the clients leave', measured: `${int(run.fdsAfter)} vs ${int(run.fdsBaseline)} before any client`, met: Math.abs(run.fdsAfter - run.fdsBaseline) <= 10 },
    loopLagTarget(run),
    {
      target: `steady clients: 0 lost, 0 duplicated, 0 out of order${redis ? ' (a resync only where the Redis restart costs one)' : ', no resync'}`,
      measured: `${int(run.lost)} lost, ${int(run.duplicated)} duplicated, ${int(run.outOfOrder)} out of order, ${int(run.resyncedClients)} clients resynced ` +
        `(the furthest-behind client at most ${int(run.clientLagMaxEvents)} events behind at a sample; all caught up ${run.traffic.drainS.toFixed(1)} s after the last notify)`,
      met: run.lost + run.duplicated + run.outOfOrder === 0 && (redis || run.resyncedClients === 0)
    },
    {
      target: 'client-side TIME_WAIT: 0',
      measured: `at most ${int(run.clientTimeWait)} at a sample (${int(run.clientTimeWaitAfterWaveStops)} within ${TIME_WAIT_S} s of a storm wave's stop, left out: the bench aborting the storm's held connections)`,
      met: run.clientTimeWait === 0
    },
    { target: 'log lines ≤ one per logIntervalMs window (per process) plus start and stop', measured: `${int(run.logLines)} lines in Tower's ${run.towerLifeS.toFixed(0)} s, budget ${int(run.logBudget)}`, met: run.logLines <= run.logBudget }
  ]
}

/** The run's figures from its traffic and Tower's log: its line count once stopped, and its life in seconds. */
export function soakRun (plan: SoakPlan, traffic: SoakTraffic, towerLog: { lines: number, text: readonly string[], lifeS: number }, machine: MachineLoad, machineNote: string | null): SoakRun {
  const { samples, durationS, fdsBaseline, fdsAfter, ...rest } = traffic
  const stops = traffic.waves.map((w) => ({ from: Math.min(w.stoppedS, w.atS + plan.storm.durationMs / 1000), to: w.stoppedS }))
  const total = (pick: (k: SoakTraffic['kinds'][number]) => number): number => traffic.kinds.reduce((sum, k) => sum + pick(k), 0)
  const run: Omit<SoakRun, 'targets'> = {
    workers: plan.workers,
    bus: plan.workers > 1 ? 'redis' : 'memory',
    finishedAt: new Date().toISOString(),
    machine,
    machineNote,
    durationS,
    attempts: counterIncrease([0, ...samples.map((s) => s.connects)]) + counterIncrease([0, ...samples.map((s) => s.refusals)]),
    publishes: traffic.posts.accepted,
    lost: total((k) => k.lost),
    duplicated: total((k) => k.duplicated),
    outOfOrder: total((k) => k.outOfOrder),
    clientLagMaxEvents: Math.max(0, ...samples.map((s) => s.clientLagEvents)),
    resyncedClients: total((k) => k.resyncs.filter(([n]) => n > 0).reduce((sum, [, clients]) => sum + clients, 0)),
    clientTimeWait: Math.max(0, ...samples.filter((s) => !afterWaveStop(s.t, stops)).map((s) => s.clientTimeWait)),
    clientTimeWaitAfterWaveStops: Math.max(0, ...samples.filter((s) => afterWaveStop(s.t, stops)).map((s) => s.clientTimeWait)),
    logLines: towerLog.lines,
    towerLog: towerLog.text,
    logBudget: logBudget(plan, towerLog.lifeS),
    towerLifeS: towerLog.lifeS,
    fdsBaseline,
    fdsAfter,
    heap: quarters(samples, durationS, (s) => s.heapUsedBytes),
    rss: quarters(samples, durationS, (s) => s.rssBytes),
    loopLagP99MaxMs: Math.max(...samples.map((s) => s.loopLagP99Ms)),
    loopLag: judgeLoopLag(samples, plan.sampleEveryMs),
    samples,
    traffic: rest,
    plan
  }
  return { ...run, targets: soakTargets(run) }
}

/**
 * The samples that bracket a storm wave: the last one before it began to the first one after it
 * stopped. autocannon cannot tell a stream from a refusal when it reconnects after every
 * request, so what the wave got is read from Tower's counters over that span.
 */
function duringWave (samples: readonly Sample[], atS: number, stoppedS: number): Sample[] {
  const before = samples.filter((s) => s.t <= atS).length
  const after = samples.findIndex((s) => s.t >= stoppedS)
  return samples.slice(Math.max(0, before - 1), after === -1 ? samples.length : after + 1)
}

function runMarkdown (run: SoakRun): string {
  const out: string[] = [`## ${run.workers === 1 ? 'One process, memory bus' : `${run.workers} workers (node:cluster), Redis bus, Redis restarted and a worker killed`} (${run.plan.name} plan, finished ${run.finishedAt})`, '']
  out.push(`Machine: ${run.machine.cpus} CPUs, load average ${run.machine.loadBefore.join(' / ')} before, ${(run.machine.loadAfter ?? []).join(' / ')} after (1/5/15 min).${run.machineNote === null ? '' : ` ${run.machineNote}.`}`, '')
  out.push(pinningText(run), '')
  const { plan, traffic } = run
  // Absent from a run written before the poster kept several in flight.
  const poster = traffic.poster as PosterStats | undefined
  const steady = plan.steady.groups.map((g) => `${g.size} ${g.population}`).join(', ')
  out.push(`${(run.durationS / 60).toFixed(1)} min of traffic: ${plan.steady.seqClients} tower-sse/client tabs and ${plan.steady.seqEventSources} spec EventSources accounted by sequence number, plus ${steady} (lib/populations); every stream ended by Tower after maxAgeMs ${int(plan.tower.maxAgeMs)} ms ± 20%, so all of them churn. ` +
    `${traffic.waves.length} storm waves of ${plan.storm.durationMs / 1000} s (autocannon offering ${int(plan.storm.perSec)}/s on as many connections, a new TCP connection per request, Retry-After ignored; what arrives is what Tower's tarpit lets through: see attempts below; its own address (X-Forwarded-For from a trusted loopback proxy), held to ${plan.storm.slots} streams by --max-clients-per-key). ` +
    `Notifies: ${plan.notify.perSec}/s plus ${plan.notify.burstSize} due at once every ${plan.notify.burstEveryMs / 1000} s, up to ${plan.notify.inFlight} in flight (retired in order; a POST times out after ${plan.notify.timeoutMs / 1000} s); ${int(traffic.posts.posted)} posted, ${int(traffic.posts.accepted)} accepted, ${int(traffic.posts.unanswered)} unanswered${Object.keys(traffic.posts.refused).length === 0 ? '' : `, refused: ${Object.entries(traffic.posts.refused).map(([status, n]) => `${int(n)}× ${status}`).join(', ')}`}. ` +
    (poster === undefined ? 'The poster\'s own figures were not recorded (a run made before it kept several in flight).' : `At most ${int(poster.maxInFlight)} in flight, at most ${int(poster.maxBehind)} behind the schedule, ${int(poster.behindAtEnd)} never sent.`), '')
  if (traffic.incidents.length > 0) out.push(`Incidents: ${traffic.incidents.map((i) => `${i.what} at ${i.atS.toFixed(0)} s`).join('; ')}.`, '')
  out.push(markdownTable(['target', 'measured (this run)', 'met'], run.targets.map((t) => [t.target, t.measured, t.met ? 'met' : '**NOT met**']), ['left', 'left', 'left']), '')
  out.push(markdownTable(
    ['steady clients', 'accounted', 'events received', 'lost', 'covered by a resync', 'duplicated', 'out of order', 'resyncs (clients × count)', 'refusals', 'closed for good'],
    traffic.kinds.map((k) => [k.kind === 'client' ? 'tower-sse/client' : 'EventSource (eventsource 4.1)', int(k.clients), int(k.received), int(k.lost), int(k.coveredByResync), int(k.duplicated), int(k.outOfOrder), k.resyncs.map(([n, c]) => `${int(c)}×${n}`).join(' '), int(k.refusals), int(k.closedForGood)]),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'left', 'right', 'right']
  ), '')
  out.push(markdownTable(
    ['storm wave', 'at s', 'attempts (client-counted)', 'admitted by Tower meanwhile (all clients)', 'refused by Tower meanwhile (all clients)', 'errors'],
    traffic.waves.map((w, i) => {
      const during = duringWave(run.samples, w.atS, w.stoppedS)
      const errors = w.failed ?? (Object.entries(w.errors).map(([code, n]) => `${int(n)} ${code}`).join(', ') || 'none')
      return [String(i + 1), w.atS.toFixed(0), int(w.attempts), int(counterIncrease(during.map((s) => s.connects))), int(counterIncrease(during.map((s) => s.refusals))), errors]
    }),
    ['right', 'right', 'right', 'right', 'right', 'left']
  ), '')
  const { loopLag } = run
  if (loopLag.over.length > 0) {
    out.push(`Windows over ${LOOP_LAG_P99_MS} ms (event-loop lag p99): ${loopLag.over.slice(0, 20).map((w) => `${span(w)} ${w.p99Ms.toFixed(1)} ms`).join('; ')}${loopLag.over.length > 20 ? `; and ${loopLag.over.length - 20} more (soak.json: loopLag.windows)` : ''}.`, '')
  }
  const every = Math.max(1, Math.ceil(run.samples.length / 12))
  out.push(`Samples (every ${every === 1 ? '' : `${every}th of the `}${plan.sampleEveryMs / 1000} s readings of Tower's GET /metrics${run.workers > 1 ? ', summed over the cluster by its primary' : ''}):`, '')
  out.push(markdownTable(
    ['t s', 'heap MB', 'RSS MB', 'open files', 'loop lag p99 ms', 'streams', 'log lines', 'slowest client, events behind'],
    run.samples.filter((_, i) => i % every === 0 || i === run.samples.length - 1).map((s) => [s.t.toFixed(0), mb(s.heapUsedBytes), mb(s.rssBytes), int(s.openFds), s.loopLagP99Ms.toFixed(1), int(s.streams), int(s.logLines), int(s.clientLagEvents)]),
    ['right', 'right', 'right', 'right', 'right', 'right', 'right', 'right']
  ), '')
  return out.join('\n')
}

/** Where the run's processes ran, as the results say it. */
function pinningText (run: SoakRun): string {
  const p = run.traffic.pinning
  if (!p.pinned) return `**Not pinned** (${p.reason ?? 'unknown'}): Tower and the load generators shared the CPUs, so Tower's figures include their contention.`
  const server = run.workers > 1 ? 'Tower (primary and workers) and its redis-server' : 'Tower'
  return `Pinned: ${server} on CPU ${p.serverCpu} (\`taskset -c ${p.serverCpu}\`; /proc read back: ${p.towerCpus ?? 'not read'}); the accounted clients, the steady populations, the storm waves, the poster (read back: ${p.posterCpus ?? 'not read'}) and the runner on CPU ${p.loadCpu}.`
}

export function soakMarkdown (results: SoakResults): string {
  return ['# bench:soak', '', 'The seed\'s 2.5 days of traffic compressed; each run judged on its own figures only.', '', ...results.runs.map(runMarkdown)].join('\n')
}

export async function soakChart (results: SoakResults): Promise<string> {
  const values = results.runs.flatMap((run) => run.samples.flatMap((s) => [
    { run: `${run.workers} × ${run.bus}`, series: 'heap used MB', t: s.t, value: s.heapUsedBytes / 1024 / 1024 },
    { run: `${run.workers} × ${run.bus}`, series: 'RSS MB', t: s.t, value: s.rssBytes / 1024 / 1024 },
    { run: `${run.workers} × ${run.bus}`, series: 'open files', t: s.t, value: s.openFds },
    { run: `${run.workers} × ${run.bus}`, series: 'loop lag p99 ms (10 s window)', t: s.t, value: s.loopLagP99Ms }
  ]))
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: 'Tower over the soak (its own /metrics, every 10 s)',
    data: { values },
    facet: { row: { field: 'series', type: 'nominal', title: null }, column: { field: 'run', type: 'nominal', title: null } },
    spec: {
      width: 360,
      height: 120,
      mark: { type: 'line', strokeWidth: 1.5 },
      encoding: {
        x: { field: 't', type: 'quantitative', title: 'seconds into the run' },
        y: { field: 'value', type: 'quantitative', title: null, scale: { zero: true } }
      }
    },
    resolve: { scale: { y: 'independent', x: 'independent' } }
  }
  return await vegaLiteSvg(spec)
}

/**
 * A run read back from soak.json as this version writes it: a run written before the soak pinned
 * its processes, kept several notifies in flight and judged every window says so (one notify at a
 * time, pinning not recorded, its windows judged from its samples).
 */
export function upgradeRun (run: SoakRun): SoakRun {
  const traffic = { ...run.traffic }
  traffic.pinning ??= { pinned: false, serverCpu: null, loadCpu: null, reason: 'not recorded: a run made before the soak pinned its processes', towerCpus: null, posterCpus: null }
  const notify = { ...run.plan.notify, inFlight: run.plan.notify.inFlight ?? 1 }
  return { ...run, traffic, plan: { ...run.plan, notify }, loopLag: run.loopLag ?? judgeLoopLag(run.samples, run.plan.sampleEveryMs) }
}

/** Writes soak.{json,md,svg} into `dir`, keeping a run with the other worker count already there. */
export async function writeSoakReport (dir: string, run: SoakRun): Promise<string> {
  const file = path.join(dir, 'soak.json')
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as SoakResults).runs.filter((r) => r.workers !== run.workers).map(upgradeRun) : []
  const results: SoakResults = { runs: [...kept, run].sort((a, b) => a.workers - b.workers) }
  const markdown = soakMarkdown(results)
  writeResults(dir, 'soak', results, markdown, await soakChart(results))
  return markdown
}
