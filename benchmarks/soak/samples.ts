import http from 'node:http'
import parsePrometheusTextFormat, { type MetricFamily } from 'parse-prometheus-text-format'

/** One reading of Tower's own GET /metrics (in a cluster: the whole cluster's, as its primary joins them). */
export interface Sample {
  /** Seconds since the run began. */
  t: number
  heapUsedBytes: number
  rssBytes: number
  openFds: number
  /** p99 of the event-loop lag since the previous scrape (prom-client resets it at each scrape): see lagWindows. */
  loopLagP99Ms: number
  streams: number
  /** Counters as read (they restart from 0 in a worker that was replaced: see counterIncrease). */
  connects: number
  refusals: number
  /** Lines Tower has printed so far, and client-side TIME_WAIT sockets on its port now. */
  logLines: number
  clientTimeWait: number
  /** Events the furthest-behind accounted client had yet to receive of those accepted so far. */
  clientLagEvents: number
}

/** The sum of every sample of `name` (all label sets); throws naming the metric if Tower has none. */
export function metricSum (families: ReadonlyMap<string, MetricFamily>, name: string): number {
  const family = families.get(name)
  if (family === undefined) throw new Error(`GET /metrics has no ${name}`)
  return family.metrics.reduce((sum, sample) => sum + Number(sample.value), 0)
}

/** The figures of a Sample that /metrics gives, from its Prometheus text. */
export function readMetrics (text: string): Omit<Sample, 't' | 'logLines' | 'clientTimeWait' | 'clientLagEvents'> {
  const families = new Map(parsePrometheusTextFormat(text).map((family) => [family.name, family]))
  return {
    heapUsedBytes: metricSum(families, 'nodejs_heap_size_used_bytes'),
    rssBytes: metricSum(families, 'process_resident_memory_bytes'),
    openFds: metricSum(families, 'process_open_fds'),
    loopLagP99Ms: metricSum(families, 'nodejs_eventloop_lag_p99_seconds') * 1000,
    streams: metricSum(families, 'tower_sse_streams'),
    connects: metricSum(families, 'tower_sse_connects_total'),
    refusals: metricSum(families, 'tower_sse_refusals_total')
  }
}

/** GET /metrics on its own connection, answered 200 within `timeoutMs`. */
export function fetchMetrics (port: number, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path: '/metrics', agent: false, timeout: timeoutMs }, (response) => {
      let text = ''
      response.setEncoding('utf8')
      response.on('data', (chunk: string) => { text += chunk })
      response.once('end', () => response.statusCode === 200 ? resolve(text) : reject(new Error(`GET /metrics answered ${String(response.statusCode)}`)))
      response.once('error', reject)
    })
    request.once('timeout', () => request.destroy(new Error(`GET /metrics: no answer within ${timeoutMs} ms`)))
    request.once('error', reject)
  })
}

/**
 * How much a counter grew over readings taken in order, as Prometheus' increase() counts it: a
 * reading below the one before is a restart from 0 (a replaced worker), so it counts in full.
 */
export function counterIncrease (readings: readonly number[]): number {
  let total = 0
  for (let i = 1; i < readings.length; i++) {
    const step = readings[i] - readings[i - 1]
    total += step >= 0 ? step : readings[i]
  }
  return total
}

export interface QuarterCheck {
  /** Means of the second and the last quarter of the run, and last ÷ second. */
  second: number
  last: number
  ratio: number
}

/**
 * Mean of `pick` over the samples of the run's second quarter and of its last: the "no
 * growth" check, which skips the first quarter (warm-up: JIT, pools, history ring filling).
 */
export function quarters (samples: readonly Sample[], durationS: number, pick: (s: Sample) => number): QuarterCheck {
  const mean = (from: number, to: number): number => {
    const values = samples.filter((s) => s.t >= from && s.t < to).map(pick)
    if (values.length === 0) throw new Error(`no samples between ${from.toFixed(0)} s and ${to.toFixed(0)} s: the run is too short to compare quarters`)
    return values.reduce((sum, v) => sum + v, 0) / values.length
  }
  const second = mean(durationS / 4, durationS / 2)
  // The last sample may land a moment after the end: it belongs to the last quarter.
  const last = mean(durationS * 3 / 4, Number.POSITIVE_INFINITY)
  return { second, last, ratio: last / second }
}

/** One window of the event-loop lag: from the scrape before to this sample's, and the p99 over it. */
export interface LagWindow { fromS: number, toS: number, p99Ms: number }

/**
 * The windows the loop-lag samples cover: prom-client's event-loop histogram restarts at every
 * scrape, so each sample's p99 is over the time since the scrape before it (the first: since the
 * runner's scrape at 0 s). A scrape that failed leaves a longer window behind the next sample.
 */
export function lagWindows (samples: readonly Sample[]): LagWindow[] {
  return samples.map((s, i) => ({ fromS: i === 0 ? 0 : samples[i - 1].t, toS: s.t, p99Ms: s.loopLagP99Ms }))
}
