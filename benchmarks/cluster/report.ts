import type { TopLevelSpec } from 'vega-lite'
import { markdownTable } from '../lib/markdown-table'
import { writeResults, type Target } from '../lib/results-files'
import { vegaLiteSvg } from '../lib/vega-svg'
import type { KindRow } from '../lib/clients/population'
import type { ChaosResult } from './chaos'
import type { FanoutRow } from '../lib/tower/fanout-phase'
import type { ClusterPlan } from './plan'
import type { MachineLoad } from '../lib/machine-load'
import type { RestartResult } from './restart'

export interface ClusterResults {
  plan: ClusterPlan
  finishedAt: string
  durationS: number
  /** The host, as one line (kernel, CPUs, Node, redis-server). */
  host: string
  /** The load before and after, added to the saved JSON once the run has ended (lib/machine-load.ts). */
  machine?: MachineLoad
  fanout: FanoutRow[]
  chaos: ChaosResult | null
  restart: RestartResult | null
  /** Why a phase has no result (it failed), if one has none. */
  failures: string[]
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US')
/** [[0, 290], [1, 10]] → "290×0 10×1" (clients × resyncs). */
const counts = (pairs: Array<[number, number]>): string => pairs.length === 0 ? 'none' : pairs.map(([n, c]) => `${int(c)}×${n}`).join(' ')
const ms = (n: number | null): string => n === null || Number.isNaN(n) ? '–' : n.toFixed(1)

/** The issue's targets, each judged on this run's figures only. */
export function targets (results: ClusterResults): Target[] {
  const list: Target[] = []
  const { fanout, chaos, restart } = results
  if (fanout.length > 0) {
    const worst = Math.min(...fanout.map((r) => r.share))
    list.push({ target: 'fan-out: a broadcast reaches 100% of streams on every instance', measured: `lowest share delivered ${(worst * 100).toFixed(3)}%`, met: worst === 1 && fanout.every((r) => r.admitted === r.streams) })
    for (const streams of [...new Set(fanout.map((r) => r.streams))]) {
      const one = fanout.find((r) => r.streams === streams && r.setup === 'memory')
      const many = fanout.find((r) => r.streams === streams && r.setup === 'redis' && r.oversubscribed !== true)
      if (one === undefined || many === undefined) continue
      const ratio = many.p99Ms / one.p99Ms
      list.push({ target: `fan-out, ${int(streams)} streams: p99 with ${many.instances} instances ≤ 1.5× p99 with 1`, measured: `${ms(many.p99Ms)} ÷ ${ms(one.p99Ms)} ms = ${ratio.toFixed(2)}×`, met: ratio <= 1.5 })
    }
  }
  if (chaos !== null) {
    const bad = chaos.kinds.reduce((sum, k) => sum + k.lost + k.duplicated + k.outOfOrder, 0)
    const detail = chaos.kinds.map((k) => `${k.kind}: ${k.lost} lost, ${k.duplicated} duplicated, ${k.outOfOrder} out of order`).join('; ')
    list.push({ target: 'chaos: 0 lost, 0 duplicated, 0 out-of-order events for every client', measured: detail, met: bad === 0 })
    const resynced = chaos.kinds.reduce((sum, k) => sum + k.resyncs.filter(([n]) => n > 0).reduce((s, [, c]) => s + c, 0), 0)
    list.push({ target: 'chaos: 0 resyncs while the history covers the gap', measured: `${resynced} clients resynced`, met: resynced === 0 })
    const limit = chaos.instances * 4
    const worstWave = Math.max(0, ...chaos.waves.map((w) => w.xrange + w.xreadExcess))
    list.push({ target: `chaos: XRANGE + extra XREAD per reconnect wave ≤ instances × 4 = ${limit}`, measured: `worst wave ${worstWave} (XRANGE per wave: ${chaos.waves.map((w) => w.xrange).join(', ')})`, met: chaos.waves.length > 0 && worstWave <= limit })
  }
  if (restart !== null) {
    // Redis came back empty: nothing proves that no acknowledged event was lost with it, so every
    // client is told once — the one that reconnects with an id of the lost stream and the one whose
    // stream stayed open alike (docs/bus-guarantees.md, "Restart without persistence").
    const count = (pick: (k: KindRow) => Array<[number, number]>, match: (n: number) => boolean): number =>
      restart.kinds.reduce((sum, k) => sum + pick(k).filter(([n]) => match(n)).reduce((s, [, c]) => s + c, 0), 0)
    const back = count((k) => k.resyncsReconnected, () => true)
    const backOne = count((k) => k.resyncsReconnected, (n) => n === 1)
    const stayed = count((k) => k.resyncsStayed, () => true)
    const stayedOne = count((k) => k.resyncsStayed, (n) => n === 1)
    list.push({ target: 'Redis restart: exactly 1 resync per client that resumes with an id of the lost stream', measured: `${int(backOne)} of ${int(back)} reconnected clients had exactly 1 (${restart.kinds.map((k) => `${k.kind}: ${counts(k.resyncsReconnected)}`).join('; ')})`, met: back > 0 && backOne === back })
    list.push({ target: 'Redis restart: exactly 1 resync per client whose stream stayed open (an empty Redis proves no continuity)', measured: `${int(stayedOne)} of ${int(stayed)} had exactly 1 (${restart.kinds.map((k) => `${k.kind}: ${counts(k.resyncsStayed)}`).join('; ')})`, met: stayed > 0 && stayedOne === stayed })
    list.push({ target: 'Redis restart: 0 notifications accepted and then lost', measured: `${restart.acceptedThenLost.length} of ${int(restart.posts.accepted)} accepted`, met: restart.acceptedThenLost.length === 0 })
    const reads = restart.readAgainMs
    const slowest = reads.some((r) => r.ms === null) ? null : Math.max(...reads.map((r) => r.ms as number))
    list.push({ target: 'Redis restart: every instance reading again within 2 s of Redis coming back', measured: slowest === null ? `not every instance said so: ${reads.map((r) => ms(r.ms)).join(', ')} ms` : `slowest ${int(slowest)} ms (${reads.map((r) => int(r.ms as number)).join(', ')})`, met: slowest !== null && slowest <= 2000 })
  }
  return list
}

function kindTable (rows: KindRow[]): string {
  return markdownTable(
    ['clients', 'accounted', 'events received', 'lost', 'covered by a resync', 'duplicated', 'out of order', 'unexpected', 'resyncs: reconnected (clients × count)', 'resyncs: stream stayed open', 'refusals', 'closed for good'],
    rows.map((k) => [
      k.kind === 'client' ? 'tower-sse/client' : 'EventSource (eventsource 4.1)',
      int(k.clients) + (k.goneAtStart > 0 ? ` (+${k.goneAtStart} gone)` : ''),
      int(k.received), int(k.lost), int(k.coveredByResync), int(k.duplicated), int(k.outOfOrder), int(k.unexpected),
      counts(k.resyncsReconnected), counts(k.resyncsStayed), int(k.refusals), int(k.closedForGood)
    ]),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'left', 'left', 'right', 'right']
  )
}

function statuses (refused: Record<string, number>): string {
  const entries = Object.entries(refused)
  return entries.length === 0 ? 'none' : entries.map(([status, n]) => `${int(n)}× ${status}`).join(', ')
}

export function clusterMarkdown (results: ClusterResults): string {
  const out: string[] = [`# bench:cluster (${results.plan.name} run, ${results.finishedAt}, ${results.durationS.toFixed(0)} s)`, '', results.host, '']
  const { fanout, chaos, restart } = results
  if (fanout.length > 0) {
    const paired = fanout.find((r) => r.setup === 'redis' && r.oversubscribed !== true)?.instances ?? results.plan.workers
    out.push(`## Fan-out: 1 instance (memory bus) vs ${paired} (Redis bus, node:cluster), same total streams`, '')
    out.push(markdownTable(
      ['setup', 'streams', 'admitted (per instance)', 'delivered', 'p50 ms', 'p99 ms', 'max ms', 'p99 vs 1 instance', 'p99 per round ms'],
      fanout.map((r) => {
        const one = fanout.find((o) => o.streams === r.streams && o.setup === 'memory')
        return [
          r.setup === 'memory' ? '1 instance, memory bus' : `${r.instances} workers, Redis bus${r.oversubscribed === true ? ' (oversubscribed: more workers than CPUs)' : ''}`,
          int(r.streams), `${int(r.admitted)} (${r.perInstance.map(int).join(' / ')})`,
          `${(r.share * 100).toFixed(2)}%`, ms(r.p50Ms), ms(r.p99Ms), ms(r.maxMs),
          one === undefined || r === one ? '1×' : `${(r.p99Ms / one.p99Ms).toFixed(2)}×`,
          r.p99ByRound.map(ms).join(', ')
        ]
      }),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'left']
    ), '')
    out.push(`Each row: the median over ${results.plan.fanout.rounds} round(s) (delivered: the worst round; max: the largest), the two setups alternating which goes first; each round ${results.plan.fanout.warmupEvents} unmeasured then ${results.plan.fanout.events} measured broadcasts, each a POST /api/notify (a new connection: node:cluster hands it to a worker) stamped with the poster's monotonic clock; delivery = stamp → arrival at the client process (raw sockets, every event × every stream).`, '')
  }
  if (chaos !== null) {
    out.push(`## Chaos: ${chaos.instances} workers, a worker SIGKILLed every ${results.plan.chaos.killEveryMs / 1000} s`, '')
    out.push(`${int(chaos.clients.client)} tower-sse/client + ${int(chaos.clients.eventsource)} EventSource clients, ${chaos.broadcastsPerSec} broadcasts/s for ${chaos.durationS} s: ${int(chaos.posts.posted)} posted, ${int(chaos.posts.accepted)} accepted, other answers: ${statuses(chaos.posts.refused)}, ${int(chaos.posts.unanswered)} without an answer (the worker holding the POST was killed: maybe published, not counted lost).`, '')
    out.push(kindTable(chaos.kinds), '')
    out.push(markdownTable(
      ['wave', 'kill at s', 'worker replaced in ms', 'client reconnects', 'last reconnect s after kill', 'XRANGE', 'XREAD', 'XREAD beyond baseline'],
      chaos.waves.map((w) => [String(w.wave), w.atS.toFixed(1), w.replacedInMs === null ? '–' : int(w.replacedInMs), int(w.reconnects), w.lastReconnectS === null ? '–' : w.lastReconnectS.toFixed(1), int(w.xrange), int(w.xread), int(w.xreadExcess)]),
      ['right', 'right', 'right', 'right', 'right', 'right', 'right', 'right']
    ), '')
    out.push(`Redis calls from \`INFO commandstats\` read before each kill (a wave's window runs to the next kill). Baseline before the first kill: ${int(chaos.baseline.xread)} XREAD and ${int(chaos.baseline.xrange)} XRANGE in ${chaos.baseline.windowS.toFixed(1)} s (each instance's one blocking reader).`, '')
  }
  if (restart !== null) {
    out.push(`## Redis restarted without persistence (${restart.instances} workers, ${restart.broadcastsPerSec} broadcasts/s)`, '')
    out.push(`Redis SIGKILLed ${restart.killAtS.toFixed(1)} s in, answering again ${int(restart.outageMs)} ms later (empty). Posts: ${int(restart.posts.posted)}, accepted ${int(restart.posts.accepted)}, other answers: ${statuses(restart.posts.refused)}, ${int(restart.posts.unanswered)} without an answer. During the outage: ${restart.duringOutage.length === 0 ? 'no refusals' : restart.duringOutage.map((o) => `${int(o.count)}× ${o.status}${o.retryAfter === null ? '' : ` (Retry-After: ${o.retryAfter})`}`).join(', ')}; ${restart.acceptedDuringOutage} accepted. Accepted and then lost: ${restart.acceptedThenLost.length}.`, '')
    out.push(kindTable(restart.kinds), '')
    if (restart.workerKilled !== null) out.push(`Worker ${restart.workerKilled.pid} was SIGKILLed ${int(restart.workerKilled.atOutageMs)} ms into the outage: its clients came back with ids of the lost stream.`, '')
    out.push(`Each worker reading again after Redis answered: ${restart.readAgainMs.map((r) => r.ms === null ? 'not seen' : `${int(r.ms)} ms (${r.via})`).join(', ')}.` +
      (restart.firstAfter === null ? ' No broadcast was accepted after the restart.' : ` First broadcast accepted after it: ${int(restart.firstAfter.acceptedAfterMs)} ms after Redis was back, received by ${int(restart.firstAfter.clients)} of ${int(restart.firstAfter.ofClients)} clients (the others were reconnecting: they get the events after their resync), the last ${int(restart.firstAfter.lastDeliveryAfterMs)} ms after Redis was back.`), '')
  }
  if (results.failures.length > 0) out.push('## Phases that failed', '', ...results.failures.map((f) => `- ${f}`), '')
  out.push('## Targets', '')
  out.push(markdownTable(['target', 'measured (this run)', 'met'], targets(results).map((t) => [t.target, t.measured, t.met ? 'met' : '**NOT met**']), ['left', 'left', 'left']))
  return out.join('\n')
}

export async function clusterChart (fanout: FanoutRow[]): Promise<string> {
  const values = fanout.flatMap((r) => [['p50', r.p50Ms], ['p99', r.p99Ms]].map(([quantile, value]) => ({
    streams: `${int(r.streams)} streams`, setup: r.setup === 'memory' ? '1 instance, memory bus' : `${r.instances} workers, Redis bus`, quantile, ms: value
  })))
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: 'Delivery latency (POST stamp → client), same total streams',
    data: { values },
    facet: { column: { field: 'streams', type: 'nominal', title: null, sort: [...new Set(values.map((v) => v.streams))] } },
    spec: {
      width: 220,
      height: 180,
      mark: 'bar',
      encoding: {
        x: { field: 'quantile', type: 'nominal', title: null, axis: { labelAngle: 0 } },
        xOffset: { field: 'setup', type: 'nominal' },
        y: { field: 'ms', type: 'quantitative', title: 'ms' },
        color: { field: 'setup', type: 'nominal', title: null, legend: { labelLimit: 300, orient: 'bottom' } }
      }
    },
    resolve: { scale: { y: 'independent' } }
  }
  return await vegaLiteSvg(spec)
}

/** Writes cluster.{json,md,svg} into `dir`; returns the markdown. */
export async function writeClusterReport (dir: string, results: ClusterResults): Promise<string> {
  const markdown = clusterMarkdown(results)
  writeResults(dir, 'cluster', results, markdown, results.fanout.length > 0 ? await clusterChart(results.fanout) : null)
  return markdown
}
