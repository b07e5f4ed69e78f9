import { Counter, Gauge, Histogram, type Registry } from 'prom-client'
import type { MetricsRegistryLike } from './metrics-option'
import { CLOSE_CAUSES, type SseStats } from './vocabulary'

/** What the cluster bus reports about itself; null while it has nothing to report. */
export interface BusState {
  up: boolean
  /** Whether Redis refuses the bus's writes for memory (stats().bus.state 'oom'). */
  outOfMemory: boolean
  /** How far the bus reader is behind the newest published event, in seconds. */
  lagSeconds: number
  /** Reads from shared storage so far (a counter). */
  reads: number
  /** Publishes Redis refused with an error so far (a counter). */
  refusedPublishes: number
}
export type BusStateProvider = () => BusState | null

/** What the metrics read: stats() when scraped, and a hook that is handed each event's fan-out time. */
export interface MetricsSource {
  stats: () => SseStats
  /** The registry's hook: it hands each event's fan-out time, in seconds, to `observe`. */
  timeBroadcasts: (observe: (seconds: number) => void) => void
}

/** From a broadcast to a handful of streams (0.1 ms) to one that stalls the event loop (1 s). */
const BROADCAST_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]

/**
 * Exposes what the plugin already counts as Prometheus metrics in `target`. Counters and gauges
 * read stats() when scraped (collect), so they equal it exactly and cost nothing between
 * scrapes; only the fan-out histogram is observed as events are delivered.
 * Labels are bounded enums (reason, cause, outcome), never a client, key or topic.
 * Returns the function that removes them again (the plugin calls it on close).
 */
export function registerMetrics (
  target: MetricsRegistryLike,
  source: MetricsSource,
  bus?: BusStateProvider
): () => void {
  // The shape was checked at register time; the app's prom-client may be another copy than ours.
  const registry = target as Registry
  const registers = [registry]
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
  const read = source.stats

  gauge('tower_sse_streams', 'Open event streams (stats().current).', () => read().current)
  gauge('tower_sse_streams_capacity', 'Streams that may be open at once: maxClients (stats().capacity).', () => read().capacity)
  counter('tower_sse_connects_total', 'Streams admitted (stats().accepted).', () => read().accepted)
  labelled('tower_sse_refusals_total', 'Stream requests refused, by reason (stats().refusals; summed: stats().rejected).',
    'reason', () => read().refusals)
  gauge('tower_sse_refusals_held', 'Refusals held in the tarpit now (stats().refusalsHeld).', () => read().refusalsHeld)
  labelled('tower_sse_disconnects_total', 'Streams ended, by cause (stats().disconnected, expired, deadSwept, dropped, shutdown, busDeaf).',
    'cause', () => {
      const stats = read()
      return Object.fromEntries(Object.entries(CLOSE_CAUSES).map(([field, cause]) => [cause, stats[field as keyof typeof CLOSE_CAUSES]]))
    })
  labelled('tower_sse_resumes_total', 'Admitted streams by how they started: replayed from history, resync, or fresh (stats().resumes).',
    'outcome', () => read().resumes)
  counter('tower_sse_replayed_events_total', 'Events replayed from history to resuming streams (stats().replayedEvents).', () => read().replayedEvents)
  counter('tower_sse_events_total', 'Events this instance fanned out to its streams: its own broadcasts and, with a shared bus, every instance\'s (stats().events).', () => read().events)
  counter('tower_sse_broadcasts_total', 'broadcast() calls made on this instance that published an event (stats().broadcasts).', () => read().broadcasts)
  counter('tower_sse_bytes_sent_total', 'Frame bytes queued on streams (stats().bytesSent).', () => read().bytesSent)
  gauge('tower_sse_storm', 'Storm widening level now: delays are multiplied by 2^level, 0 is calm (stats().stormLevel).',
    () => read().stormLevel, 'max')

  names.push('tower_sse_broadcast_seconds')
  const broadcastSeconds = new Histogram({
    name: 'tower_sse_broadcast_seconds',
    help: 'Time one event\'s fan-out takes here: encode once and queue on every stream (one per stats().events).',
    buckets: BROADCAST_BUCKETS,
    registers
  })
  source.timeBroadcasts((seconds) => broadcastSeconds.observe(seconds))

  if (bus !== undefined) {
    gauge('tower_sse_bus_up', 'Whether the bus is connected and proves it receives (1) or not (0; out of memory included).', () => bus()?.up === true ? 1 : 0, 'min')
    gauge('tower_sse_bus_out_of_memory', 'Whether Redis refuses the bus\'s writes for memory (1) or not (0).', () => bus()?.outOfMemory === true ? 1 : 0, 'max')
    counter('tower_sse_bus_refused_publishes_total', 'Publishes Redis refused with an error, out of memory among them (stats().bus.refusedPublishes).', () => bus()?.refusedPublishes ?? 0)
    gauge('tower_sse_bus_lag_seconds', 'How far the bus reader is behind the newest event, in seconds.', () => bus()?.lagSeconds ?? 0, 'max')
    counter('tower_sse_bus_reads_total', 'Reads from the bus storage (resumes the local history could not cover).', () => bus()?.reads ?? 0)
  }
  return () => {
    for (const name of names) registry.removeSingleMetric(name)
  }
}
