import type { StreamCounts } from './servers/contract'

/** A server process's counters since it started, as it answers `stats`. */
export interface ServerStats extends StreamCounts {
  /** Epoch ms at which the server took this snapshot. */
  at: number
  /** Requests to the events route (admitted or not). */
  connects: number
  /** TCP connections accepted (fewer than connects when clients reuse a kept-alive socket). */
  tcpConnects: number
  /** Lines the server's logger wrote. */
  logLines: number
  /** Peak resident set size so far (the kernel's high-water mark). */
  maxRssBytes: number
  /** Cumulative event-loop idle and active time (perf_hooks), in ms. */
  elu: { idle: number, active: number }
}

/** `count` events over `ms` milliseconds as a rate per minute (0 over an empty span). */
export function perMinute (count: number, ms: number): number {
  return ms > 0 ? count * 60_000 / ms : 0
}

/** Event-loop utilisation between two snapshots, 0..1. */
export function eluBetween (from: ServerStats, to: ServerStats): number {
  const active = to.elu.active - from.elu.active
  const total = active + to.elu.idle - from.elu.idle
  return total > 0 ? active / total : 0
}
