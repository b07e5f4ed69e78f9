import { Registry } from 'prom-client'
import { metricsRoute } from '../../../../lib/tower/metrics-route'
import { TOWER_ROUTES } from '../../../../lib/tower/routes'
import type { StartContender } from './contender'
import { startTowerSseWith } from './tower-sse'

/**
 * tower-sse with its `metrics` option on, exactly as the tower-sse row otherwise, and GET
 * /metrics served by Tower's own route: what metrics cost a broadcast, and what a scrape costs.
 */
export const startTowerSseMetrics: StartContender = async (options) => {
  const registry = new Registry()
  const server = await startTowerSseWith(options, { metrics: registry }, async (app) => {
    await app.register(metricsRoute, { registry })
  })
  return { ...server, metricsPath: TOWER_ROUTES.metrics }
}
