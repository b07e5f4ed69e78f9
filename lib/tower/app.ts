import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import { collectDefaultMetrics, Registry } from 'prom-client'
import towerSse, { type TowerSseOptions } from '../index'
import { metricsRoute } from './metrics-route'
import { notifyRoute } from './notify-route'
import { staticAssets } from './static-assets'
import { statsRoute } from './stats-route'

export interface TowerAppOptions {
  /** Plugin options (as parsed from flags and environment); Tower adds its own initialEvent. */
  sse?: TowerSseOptions
  /** Fastify's logger; on by default, tests turn it off. */
  logger?: FastifyServerOptions['logger']
}

/**
 * The Tower server: tower-sse at GET /api/events, POST /api/notify, GET /api/events/stats,
 * GET /metrics and the dashboard. Returns the instance unstarted; the caller listens (and closes).
 */
export function buildTower (options: TowerAppOptions = {}): FastifyInstance {
  const app = Fastify({
    logger: options.logger ?? true,
    // The incident wrote 774K lines, one per connection: the plugin logs one summary per window.
    logController: new LogController({ disableRequestLogging: true }),
    // Fastify's defaults would turn {"type": 5} into "5" and silently drop unknown properties.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false } }
  })
  // Tower's own registry (not prom-client's global one): the plugin's metrics and Node's.
  const metrics = new Registry()
  collectDefaultMetrics({ register: metrics })
  void app.register(towerSse, {
    ...options.sse,
    initialEvent: (client) => ({ data: { type: 'connected', id: client.id } }),
    metrics
  })
  void app.register(metricsRoute, { registry: metrics })
  void app.register(notifyRoute)
  void app.register(statsRoute)
  void app.register(staticAssets)
  return app
}
