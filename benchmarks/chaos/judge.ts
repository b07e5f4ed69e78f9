import type { PostRecord } from './poster'

/** What one fault's row measured (see docs/bus-operations.md for each column). */
export interface ChaosRow {
  fault: string
  title: string
  perSec: number
  /** Clients per Tower instance (two instances on the same Redis). */
  clients: number
  posted: number
  acknowledged: number
  refused: number
  timedOut: number
  /** Ticks skipped because maxInFlight notifies were already out. */
  skipped: number
  /** Client-receipts missing: acknowledged (200), never received, no resync covering it. */
  lostSilently: number
  coveredByResync: number
  duplicated: number
  outOfOrder: number
  /** Client-receipts of events whose notify was answered with an error or timed out. */
  late: number
  /** Resyncs per client: the most any client got, and the mean. */
  resyncs: { max: number, mean: number }
  /** Notifies sent from the fault's start to its end plus the recovery window. */
  notifyDuringFault: { count: number, p99Ms: number | null, maxMs: number | null }
  /** Clients not connected again 30 s after the fault (their missing events count as lost). */
  clientsAway: number
  /** Streams the server ended under a client that kept reading (each reconnect counts). */
  streamsDropped: number
  /** The streams the instances the fault deafened closed while deaf (told and closed with a retry, by design); 0 elsewhere. */
  deafClosed: number
  /** From the first failed notify to the next acknowledged one (0: none failed; null: none acknowledged after). */
  publishAgainMs: number | null
  /**
   * The stats route of instance A, polled: states seen in order, when it first left 'up' after the
   * fault began, and when it first said 'up' again after the fault ended (null: not seen).
   */
  bus: { states: string[], leftUpAfterMs: number | null, upAgainAfterMs: number | null }
  faultMs: number
  /** Losing data is expected of this fault (then one resync per client is allowed). */
  losesData: boolean
  /** A stall of Redis: the bus must leave 'up' within 2 s. */
  stall: boolean
  failover: boolean
  /** An instance (A, or both on a stall) deaf longer than its streams are kept: detected and recovered within the bounds, one resync per client (the signal). */
  deafens: boolean
}

export const TARGETS = {
  notifyMaxMs: 1500,
  busLeavesUpWithinMs: 2000,
  failoverPublishAgainMs: 5000,
  deafDetectedWithinMs: 5000,
  upAgainWithinMs: 5000
} as const

export interface Verdict { target: string, met: boolean, value: string }

/** p99 and max of the answer times (ms) of the notifies sent in [from, to]; a timeout counts as its full wait. */
export function answerTimes (records: readonly PostRecord[], from: number, to: number): ChaosRow['notifyDuringFault'] {
  const times = records.filter((r) => r.sentAt >= from && r.sentAt <= to).map((r) => r.answeredAt - r.sentAt).sort((a, b) => a - b)
  if (times.length === 0) return { count: 0, p99Ms: null, maxMs: null }
  return { count: times.length, p99Ms: times[Math.ceil(0.99 * times.length) - 1], maxMs: times[times.length - 1] }
}

/** From the first notify that failed to the answer of the next one accepted after it (sequence order). */
export function publishAgainMs (records: readonly PostRecord[]): number | null {
  const sorted = [...records].sort((a, b) => a.sentAt - b.sentAt)
  const first = sorted.find((r) => r.outcome !== 'accepted')
  if (first === undefined) return 0
  const next = sorted.find((r) => r.sentAt > first.sentAt && r.outcome === 'accepted')
  return next === undefined ? null : next.answeredAt - first.sentAt
}

/** What a stats poll that got no answer in time records: not a state, and not proof of leaving 'up'. */
export const NO_ANSWER = 'no answer'

/**
 * The states seen (consecutive repeats folded), when, after `from`, the route first answered with
 * a state other than 'up' (a route that hangs has not said so), and when, after `to`, it first
 * answered 'up' once it had left it.
 */
export function busStates (samples: ReadonlyArray<{ at: number, state: string }>, from: number, to: number): ChaosRow['bus'] {
  const states: string[] = []
  for (const { state } of samples) if (states[states.length - 1] !== state) states.push(state)
  const left = samples.find((s) => s.at >= from && s.state !== 'up' && s.state !== NO_ANSWER)
  const again = left === undefined ? undefined : samples.find((s) => s.at >= Math.max(to, left.at) && s.state === 'up')
  return { states, leftUpAfterMs: left === undefined ? null : left.at - from, upAgainAfterMs: again === undefined ? null : again.at - to }
}

/** [resyncs, clients] pairs → the most and the mean. */
export function resyncSummary (pairs: ReadonlyArray<[number, number]>): ChaosRow['resyncs'] {
  const clients = pairs.reduce((sum, [, n]) => sum + n, 0)
  const total = pairs.reduce((sum, [r, n]) => sum + r * n, 0)
  return { max: Math.max(0, ...pairs.filter(([, n]) => n > 0).map(([r]) => r)), mean: clients === 0 ? 0 : total / clients }
}

/** The targets, judged for one row. */
export function judge (row: ChaosRow): Verdict[] {
  const verdicts: Verdict[] = [
    { target: 'acknowledged-then-lost silently = 0', met: row.lostSilently === 0, value: String(row.lostSilently) },
    { target: 'late deliveries = 0', met: row.late === 0, value: String(row.late) },
    { target: 'healthy streams dropped = 0', met: row.streamsDropped === 0, value: String(row.streamsDropped) },
    {
      target: `notify answered within ${TARGETS.notifyMaxMs} ms (max)`,
      met: row.notifyDuringFault.maxMs !== null && row.notifyDuringFault.maxMs <= TARGETS.notifyMaxMs,
      value: row.notifyDuringFault.maxMs === null ? 'no notify' : `${row.notifyDuringFault.maxMs} ms`
    },
    row.losesData || row.deafens
      ? { target: 'resyncs <= 1 per client', met: row.resyncs.max <= 1, value: String(row.resyncs.max) }
      : { target: 'resyncs = 0 (nothing lost)', met: row.resyncs.max === 0, value: String(row.resyncs.max) }
  ]
  if (row.stall) {
    const left = row.bus.leftUpAfterMs
    verdicts.push({ target: `bus not up within ${TARGETS.busLeavesUpWithinMs} ms of the stall`, met: left !== null && left <= TARGETS.busLeavesUpWithinMs, value: left === null ? 'stayed up' : `${left} ms` })
  }
  if (row.failover) {
    const again = row.publishAgainMs
    verdicts.push({ target: `publishing again within ${TARGETS.failoverPublishAgainMs} ms`, met: again !== null && again <= TARGETS.failoverPublishAgainMs, value: again === null ? 'never' : `${again} ms` })
  }
  if (row.deafens) {
    const { leftUpAfterMs: left, upAgainAfterMs: again } = row.bus
    verdicts.push(
      { target: `deaf said within ${TARGETS.deafDetectedWithinMs} ms`, met: left !== null && left <= TARGETS.deafDetectedWithinMs, value: left === null ? 'stayed up' : `${left} ms` },
      { target: `up again within ${TARGETS.upAgainWithinMs} ms of the heal`, met: again !== null && again <= TARGETS.upAgainWithinMs, value: again === null ? 'never' : `${again} ms` }
    )
  }
  return verdicts
}
