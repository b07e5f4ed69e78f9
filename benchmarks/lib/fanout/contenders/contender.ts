import type { BenchEvent } from '../payload'

/** The stream route every contender serves. */
export const STREAM_PATH = '/events'

/** One SSE library set up the way its README documents, serving STREAM_PATH on loopback. */
export interface ContenderServer {
  readonly port: number
  /** Streams open now. */
  size: () => number
  /** Sends one event to every open stream, the way the library documents broadcasting. */
  broadcast: (event: BenchEvent) => void
  close: () => Promise<void>
  /** Where the contender answers a Prometheus scrape, if it exports metrics. */
  metricsPath?: string
  /** The library's own counts (tower-sse's `stats()`), for contenders that keep them. */
  stats?: () => unknown
}

export interface ContenderOptions {
  /** Streams the server must accept (libraries with a cap get at least this). */
  maxClients: number
  /** A comment to every stream this often (bench:scale's idle loop); without it, none. */
  heartbeatMs?: number
}

export type StartContender = (options: ContenderOptions) => Promise<ContenderServer>
