import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import towerSse, { DEFAULTS, type TowerSseOptions } from '../index'
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
 * The Tower server: tower-sse at GET /api/events, POST /api/notify, GET /api/events/stats and
 * the dashboard. Returns the instance unstarted; the caller listens (and closes).
 */
export function buildTower (options: TowerAppOptions = {}): FastifyInstance {
  const app = Fastify({
    logger: options.logger ?? true,
    // The incident wrote 774K lines, one per connection: the plugin logs one summary per window.
    logController: new LogController({ disableRequestLogging: true }),
    // Fastify's defaults would turn {"type": 5} into "5" and silently drop unknown properties.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false } }
  })
  void app.register(towerSse, {
    ...options.sse,
    initialEvent: (client) => ({ data: { type: 'connected', id: client.id } })
  })
  void app.register(notifyRoute)
  const redis = options.sse?.redis
  void app.register(statsRoute, { redis: typeof redis === 'string' ? redis : undefined, redisKey: options.sse?.redisKey ?? DEFAULTS.redisKey })
  void app.register(staticAssets)
  return app
}
