import cluster, { type Worker } from 'node:cluster'
import { AggregatorRegistry, type Registry } from 'prom-client'

const ASK = 'tower:cluster-metrics?'
const ANSWER = 'tower:cluster-metrics'
/** prom-client's primary gives up on a silent worker after 5 s; a worker waits a little longer. */
const ANSWER_TIMEOUT_MS = 6000

interface Ask { type: typeof ASK, id: number }
interface Answer { type: typeof ANSWER, id: number, text?: string, error?: string }

/**
 * In the cluster primary: answers each worker's GET /metrics with the metrics of every worker,
 * aggregated by prom-client's AggregatorRegistry (counters and stream gauges summed, the storm
 * level the highest), so one scrape of any worker gives the whole cluster. Returns the stop function.
 */
export function serveClusterMetrics (): () => void {
  const aggregator = new AggregatorRegistry()
  const onMessage = (worker: Worker, message: Partial<Ask>): void => {
    if (message?.type !== ASK || typeof message.id !== 'number') return
    const id = message.id
    aggregator.clusterMetrics().then(
      (text): Answer => ({ type: ANSWER, id, text }),
      (error: Error): Answer => ({ type: ANSWER, id, error: error.message })
    ).then((answer) => {
      if (worker.isConnected()) worker.send(answer)
    }, () => {})
  }
  cluster.on('message', onMessage)
  return () => { cluster.off('message', onMessage) }
}

let asked = 0
const pending = new Map<number, (answer: Answer) => void>()

/**
 * In a worker, once, before any scrape: the primary collects `registry` from this worker when any
 * worker is scraped (prom-client answers it; constructing an AggregatorRegistry installs that
 * listener), and this worker's own questions get their answers.
 */
export function joinClusterMetrics (registry: Registry): void {
  AggregatorRegistry.setRegistries([registry])
  void new AggregatorRegistry()
  process.on('message', (message: Partial<Answer>) => {
    if (message?.type === ANSWER && typeof message.id === 'number') pending.get(message.id)?.(message as Answer)
  })
}

/** In a worker (see joinClusterMetrics): the cluster's metrics, asked of the primary; rejects when it does not answer. */
export function clusterMetricsFromPrimary (): Promise<string> {
  const id = ++asked
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => settle({ type: ANSWER, id, error: `the cluster primary did not answer within ${ANSWER_TIMEOUT_MS} ms` }), ANSWER_TIMEOUT_MS)
    const settle = (answer: Answer): void => {
      clearTimeout(timer)
      pending.delete(id)
      if (answer.text !== undefined) resolve(answer.text)
      else reject(new Error(`cluster metrics: ${answer.error ?? 'no answer'}`))
    }
    pending.set(id, settle)
    ;(process.send as (message: Ask) => boolean)({ type: ASK, id })
  })
}
