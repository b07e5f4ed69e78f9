import cluster from 'node:cluster'
import type { FastifyPluginCallback } from 'fastify'
import type { Registry } from 'prom-client'
import { clusterMetricsFromPrimary, joinClusterMetrics } from './cluster-metrics'
import { TOWER_ROUTES } from './routes'

export interface MetricsRouteOptions {
  /** Tower's registry: the plugin's metrics plus Node's process metrics. */
  registry: Registry
}

/**
 * GET /metrics in the Prometheus text format. In a cluster worker it answers for the whole
 * cluster, as aggregated by the primary (serveClusterMetrics). It stays behind every rule the
 * other routes obey (host allowlist included): a page on another origin must not read it.
 */
export const metricsRoute: FastifyPluginCallback<MetricsRouteOptions> = (fastify, { registry }, done) => {
  if (cluster.isWorker) joinClusterMetrics(registry)
  fastify.get(TOWER_ROUTES.metrics, async (_request, reply) => {
    const text = cluster.isWorker ? await clusterMetricsFromPrimary() : await registry.metrics()
    void reply.header('content-type', registry.contentType).header('cache-control', 'no-store')
    return text
  })
  done()
}
