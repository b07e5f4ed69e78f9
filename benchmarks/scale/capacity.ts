import type { FanoutRow } from '../lib/tower/fanout-phase'
import type { Target } from '../lib/results-files'
import type { ScaleRow } from './ladder'

/**
 * Share of one core a process may spend fanning out before it should be split: the rest is
 * for admission, notify requests, GC and bursts.
 */
export const CORE_BUDGET = 0.5
/** tower-sse's default heartbeat: what a deployment pays unless it changes heartbeatMs. */
export const DEFAULT_HEARTBEAT_MS = 30_000
const KB_PER_GB = 1024 * 1024

/** The capacity-planning figures, each from the measured row at the ceiling (see docs/capacity.md). */
export interface Capacity {
  contender: string
  /** The row they come from. */
  streams: number
  /** 1 GB ÷ RSS per stream. */
  streamsPerGB: number
  /** streams × 1000 ÷ broadcastMs: one-event deliveries a core makes per second at that size. */
  deliveriesPerCoreSecond: number
  /** deliveriesPerCoreSecond × CORE_BUDGET ÷ events per second per stream. */
  streamsPerCore: Array<{ eventsPerSecond: number, streams: number }>
  /** CPU per heartbeat sweep at the ceiling, and the share of a core it takes at the default 30 s heartbeat. */
  heartbeatCpuMs: number
  heartbeatCoreShare: number
}

export function capacity (row: ScaleRow, eventRates: readonly number[] = [1, 10]): Capacity {
  const deliveriesPerCoreSecond = row.streams * 1000 / row.broadcastMs
  return {
    contender: row.contender,
    streams: row.streams,
    streamsPerGB: Math.floor(KB_PER_GB / row.rssKBPerStream),
    deliveriesPerCoreSecond: Math.round(deliveriesPerCoreSecond),
    streamsPerCore: eventRates.map((eventsPerSecond) => ({ eventsPerSecond, streams: Math.floor(deliveriesPerCoreSecond * CORE_BUDGET / eventsPerSecond) })),
    heartbeatCpuMs: row.heartbeatCpuMs,
    heartbeatCoreShare: row.heartbeatCpuMs / DEFAULT_HEARTBEAT_MS
  }
}

/** The largest stream count both contenders reached, with each one's row there. */
export function atTop (rows: readonly ScaleRow[], contender: string, baseline: string): { ours: ScaleRow, raw: ScaleRow } | null {
  const counts = (name: string): Set<number> => new Set(rows.filter((r) => r.contender === name).map((r) => r.streams))
  const ourCounts = counts(contender)
  const shared = [...counts(baseline)].filter((n) => ourCounts.has(n))
  if (shared.length === 0) return null
  const top = Math.max(...shared)
  const find = (name: string): ScaleRow => rows.find((r) => r.contender === name && r.streams === top) as ScaleRow
  return { ours: find(contender), raw: find(baseline) }
}

const ratio = (a: number, b: number): string => `${a} ÷ ${b} = ${(a / b).toFixed(2)}×`

/** The scale targets, judged on this run's rows (at the largest count both contenders reached). */
export function scaleTargets (rows: readonly ScaleRow[], contender: string, baseline: string, cluster: FanoutRow | null): Target[] {
  const list: Target[] = []
  const top = atTop(rows, contender, baseline)
  if (top !== null) {
    const { ours, raw } = top
    const at = `at ${ours.streams.toLocaleString('en-US')} streams`
    list.push({ target: `heap per stream ≤ 1.1× the raw loop's ${at}`, measured: `${ratio(ours.heapKBPerStream, raw.heapKBPerStream)} (KB)`, met: ours.heapKBPerStream <= 1.1 * raw.heapKBPerStream })
    const ladder = rows.filter((r) => r.contender === contender).sort((a, b) => a.streams - b.streams)
    const first = ladder[0]
    const worst = Math.max(...ladder.map((r) => Math.abs(r.heapKBPerStream / first.heapKBPerStream - 1)))
    list.push({ target: `heap per stream flat (±10%) from ${first.streams.toLocaleString('en-US')} up`, measured: `${ladder.map((r) => r.heapKBPerStream).join(', ')} KB: at most ${(worst * 100).toFixed(1)}% off`, met: worst <= 0.1 })
    list.push({ target: `event-loop delay p99 with every stream idle (heartbeat running) ≤ 20 ms ${at}`, measured: `${ours.loopDelayP99Ms} ms (raw ${raw.loopDelayP99Ms} ms)`, met: ours.loopDelayP99Ms <= 20 })
    list.push({ target: `broadcast time ≤ 1.1× raw ${at}`, measured: `${ratio(ours.broadcastMs, raw.broadcastMs)} (ms)`, met: ours.broadcastMs <= 1.1 * raw.broadcastMs })
    list.push({ target: `GET /metrics ≤ 20 ms ${at}`, measured: ours.metricsMs === null ? 'not measured' : `median ${ours.metricsMs} ms (max ${ours.metricsMaxMs ?? '–'} ms)`, met: ours.metricsMs !== null && ours.metricsMs <= 20 })
  }
  if (cluster !== null) {
    list.push({
      target: `${cluster.instances} workers on Redis hold ${cluster.streams.toLocaleString('en-US')} streams, 100% delivered`,
      measured: `${cluster.admitted.toLocaleString('en-US')} admitted (${cluster.perInstance.join(' / ')}), ${(cluster.share * 100).toFixed(3)}% delivered`,
      met: cluster.admitted === cluster.streams && cluster.share === 1
    })
  }
  return list
}
