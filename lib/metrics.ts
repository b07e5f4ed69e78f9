import { Counter, Gauge, Histogram, type Registry } from 'prom-client'
import type { ActivityLog } from './activity-log'
import type { SseRegistry } from './registry'

/** What the cluster bus reports about itself; null while it has nothing to report. */
export interface BusState {
  up: boolean
  /** How far the bus reader is behind the newest published event, in seconds. */
  lagSeconds: number
  /** Reads from shared storage so far (a counter). */
  reads: number
}
export type BusStateProvider = () => BusState | null

/** From a broadcast to a handful of streams (0.1 ms) to one that stalls the event loop (1 s). */
const BROADCAST_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]

/**
 * Exposes what the plugin already counts as Prometheus metrics in `target`. Counters and gauges
 * read the plugin's own totals when scraped (collect), so they equal stats() exactly and cost
 * nothing between scrapes; only the broadcast histogram is observed as broadcasts happen.
 * Labels are bounded enums (reason, cause, outcome), never a client, key or topic.
 * Returns the function that removes them again (the plugin calls it on close).
 */
export function registerMetrics (
  target: Registry,
  registry: SseRegistry,
  activity: ActivityLog,
  bus?: BusStateProvider
): () => void {
  const registers = [target]
  const names: string[] = []
  const gauge = (name: string, help: string, read: () => number, aggregator: 'sum' | 'max' | 'min' = 'sum'): void => {
    names.push(name)
    // eslint-disable-next-line no-new -- a prom-client metric registers itself as it is constructed
    new Gauge({ name, help, registers, aggregator, collect () { this.set(read()) } })
  }
  const counter = (name: string, help: string, read: () => number): void => {
    names.push(name)
    // eslint-disable-next-line no-new -- a prom-client metric registers itself as it is constructed
    new Counter({ name, help, registers, collect () { this.reset(); this.inc(read()) } })
  }
  const labelled = (name: string, help: string, label: string, read: () => Record<string, number>): void => {
    names.push(name)
    // eslint-disable-next-line no-new -- a prom-client metric registers itself as it is constructed
    new Counter({
      name,
      help,
      labelNames: [label],
      registers,
      collect () {
        this.reset()
        for (const [value, count] of Object.entries(read())) this.inc({ [label]: value }, count)
      }
    })
  }
  const { totals } = activity

  gauge('tower_sse_streams', 'Open event streams (stats().current).', () => registry.size)
  gauge('tower_sse_streams_capacity', 'Streams that may be open at once: maxClients (stats().capacity).', () => registry.capacity)
  counter('tower_sse_connects_total', 'Streams admitted (stats().accepted).', () => totals.accepted)
  labelled('tower_sse_refusals_total', 'Stream requests refused, by reason (stats().refusals; summed: stats().rejected).',
    'reason', () => activity.refusals)
  gauge('tower_sse_refusals_held', 'Refusals held in the tarpit now (stats().refusalsHeld).', () => activity.admissionGauges().refusalsHeld)
  labelled('tower_sse_disconnects_total', 'Streams ended, by cause (stats().disconnected, expired, deadSwept, dropped, shutdown).',
    'cause', () => ({
      client: totals.disconnected,
      expired: totals.expired,
      swept: totals.deadSwept,
      dropped: totals.dropped,
      shutdown: totals.shutdown
    }))
  labelled('tower_sse_resumes_total', 'Admitted streams by how they started: replayed from history, resync, or fresh (stats().resumes).',
    'outcome', () => activity.resumes)
  counter('tower_sse_replayed_events_total', 'Events replayed from history to resuming streams (stats().replayedEvents).', () => activity.replayedEvents)
  counter('tower_sse_broadcasts_total', 'Events this instance fanned out: its own broadcasts, and with the Redis bus every instance\'s (stats().broadcasts).', () => activity.broadcasts)
  counter('tower_sse_bytes_sent_total', 'Frame bytes queued on streams (stats().bytesSent).', () => registry.bytesSent)
  gauge('tower_sse_storm', 'Storm widening level now: delays are multiplied by 2^level, 0 is calm (stats().stormLevel).',
    () => activity.admissionGauges().stormLevel, 'max')

  names.push('tower_sse_broadcast_seconds')
  const broadcastSeconds = new Histogram({
    name: 'tower_sse_broadcast_seconds',
    help: 'Time one broadcast takes: encode once and queue on every stream.',
    buckets: BROADCAST_BUCKETS,
    registers
  })
  registry.timeBroadcasts(() => broadcastSeconds.startTimer())

  if (bus !== undefined) {
    gauge('tower_sse_bus_up', 'Whether the bus is connected (1) or not (0).', () => bus()?.up === true ? 1 : 0, 'min')
    gauge('tower_sse_bus_lag_seconds', 'How far the bus reader is behind the newest event, in seconds.', () => bus()?.lagSeconds ?? 0, 'max')
    counter('tower_sse_bus_reads_total', 'Reads from the bus storage (resumes the local history could not cover).', () => bus()?.reads ?? 0)
  }
  return () => {
    for (const name of names) target.removeSingleMetric(name)
  }
}
