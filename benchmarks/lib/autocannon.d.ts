// The parts of autocannon 9 the benchmarks use (the package ships no types).
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events'

  namespace autocannon {
    interface Options {
      url: string
      connections?: number
      /** Seconds. */
      duration?: number
      /** Requests per second across all connections. */
      overallRate?: number
      /** Reconnect after this many requests on a connection (1: a new TCP connection per request). */
      reconnectRate?: number
      /** Seconds before a request counts as timed out. */
      timeout?: number
      headers?: Record<string, string>
    }
    interface Stats {
      average: number
      mean: number
      stddev: number
      min: number
      max: number
      total: number
      p50: number
      p90: number
      p99: number
    }
    interface Result {
      /** Seconds. */
      duration: number
      requests: Stats & { sent: number }
      /** Milliseconds. */
      latency: Stats
      errors: number
      timeouts: number
      non2xx: number
      statusCodeStats: Record<string, { count: number }>
    }
    interface Instance extends EventEmitter {
      stop: () => void
    }
  }

  function autocannon (options: autocannon.Options, callback: (error: Error | null, result: autocannon.Result) => void): autocannon.Instance
  export = autocannon
}
