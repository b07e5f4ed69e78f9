import cluster, { type Worker } from 'node:cluster'
import { backoffDelayMs } from '../shared/backoff'

/** A dead worker is replaced at once, but at most this many times per window: a crash loop stops. */
const MAX_RESTARTS_PER_WORKER = 3
const RESTART_WINDOW_MS = 60_000
/**
 * A worker that dies before it listens (its bus cannot start while Redis is down) is started again
 * after a full-jitter backoff (the client's), not counted as a crash: an outage does not use up the budget.
 */
const START_RETRY_BASE_MS = 250
const START_RETRY_CAP_MS = 5000

export interface PrimaryOptions {
  workers: number
  /** Workers drain their streams on SIGTERM (drainMs and a margin); this bounds a shutdown that hangs. */
  stopWithinMs: number
  /** One line per event (workers started, died, replaced). */
  say: (line: string) => void
  /** Exits the process with a one-line error. */
  fail: (message: string) => never
  now?: () => number
  random?: () => number
}

/**
 * The node:cluster primary: forks `workers` copies of the CLI (same flags, same port; the Redis
 * bus makes them one server), replaces a worker that dies, and on SIGINT/SIGTERM asks every
 * worker to drain and exits once they are gone.
 */
export function runPrimary ({ workers, stopWithinMs, say, fail, now = Date.now, random = Math.random }: PrimaryOptions): void {
  let stopping = false
  const restarts: number[] = []
  const listened = new Set<number>()
  /** Start-up failures in a row (reset by a worker that listens): the backoff's attempt. */
  let startFailures = 0
  const waiting = new Set<NodeJS.Timeout>()
  cluster.on('listening', (worker) => {
    listened.add(worker.id)
    startFailures = 0
  })
  const fork = (): Worker => {
    const worker = cluster.fork()
    say(`tower: worker ${worker.process.pid ?? '?'} started`)
    return worker
  }
  cluster.on('exit', (worker, code, signal) => {
    const how = signal === null ? `code ${code}` : signal
    if (stopping) {
      say(`tower: worker ${worker.process.pid ?? '?'} exited (${how})`)
      if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(0)
      return
    }
    if (!listened.delete(worker.id)) {
      const delayMs = backoffDelayMs(++startFailures, random, START_RETRY_BASE_MS, START_RETRY_CAP_MS)
      say(`tower: worker ${worker.process.pid ?? '?'} died (${how}) before it listened; starting another in ${delayMs} ms`)
      const timer = setTimeout(() => {
        waiting.delete(timer)
        if (!stopping) fork()
      }, delayMs)
      waiting.add(timer)
      return
    }
    const t = now()
    while (restarts.length > 0 && restarts[0] <= t - RESTART_WINDOW_MS) restarts.shift()
    if (restarts.length >= MAX_RESTARTS_PER_WORKER * workers) {
      fail(`worker ${worker.process.pid ?? '?'} died (${how}) after ${restarts.length} restarts in ${RESTART_WINDOW_MS / 1000} s; giving up`)
    }
    restarts.push(t)
    say(`tower: worker ${worker.process.pid ?? '?'} died (${how}); starting another`)
    fork()
  })
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) return
    stopping = true
    say(`tower: ${signal}: stopping ${workers} workers`)
    for (const timer of waiting) clearTimeout(timer)
    if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(0)
    setTimeout(() => fail(`workers did not stop within ${stopWithinMs} ms after ${signal}; exiting`), stopWithinMs).unref()
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM')
  }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
  say(`tower: primary ${process.pid} running ${workers} workers with the Redis bus`)
  serveMetricsIfInstalled()
  for (let i = 0; i < workers; i++) fork()
}

/**
 * One scrape of any worker's GET /metrics answers for the cluster: the primary aggregates the
 * workers' registries (lib/tower/cluster-metrics.ts). prom-client is an optional peer: without it
 * the workers answer /metrics with 501 and the primary has nothing to serve.
 */
function serveMetricsIfInstalled (): void {
  try {
    require.resolve('prom-client')
  } catch {
    return
  }
  const { serveClusterMetrics } = require('./cluster-metrics') as typeof import('./cluster-metrics')
  serveClusterMetrics()
}
