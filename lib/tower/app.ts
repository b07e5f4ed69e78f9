import { createHash } from 'node:crypto'
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import type { Registry } from 'prom-client'
import { TowerMetricsUnavailableError } from './errors'
import towerSse, { ALL_TOPICS, DEFAULTS, topicsFromQuery, type TopicsFromRequest, type TowerSseOptions } from '..'
import { TOWER_ROUTES } from './routes'
import { notifyRoute } from './notify-route'
import { requireOptional } from './optional'
import { DEFAULT_ALLOWED_HOSTS, guardRequests } from './request-guard'
import { staticAssets } from './static-assets'
import { readyRoute } from './ready-route'
import { statsRoute } from './stats-route'

/** Tower's own settings besides the plugin's, with their defaults. */
export const TOWER_DEFAULTS = Object.freeze({
  requestTimeoutMs: 10_000
})

/** Fastify's `trustProxy`, in the form Tower accepts: the proxies' addresses and CIDR ranges (never `true`). */
export type TrustProxy = readonly string[]

export interface TowerAppOptions {
  /** Plugin options (as parsed from flags and environment); Tower adds its own initialEvent. */
  sse?: TowerSseOptions
  /** Fastify's logger; on by default, tests turn it off. */
  logger?: FastifyServerOptions['logger']
  /** Hosts answered besides DEFAULT_ALLOWED_HOSTS (the CLI adds the one it listens on). */
  allowedHosts?: readonly string[]
  /** When set, state-changing requests (notify) need `Authorization: Bearer <token>`. */
  token?: string
  /** A request's headers and body must arrive within this many ms, else 408 and closed. */
  requestTimeoutMs?: number
  /** Proxies whose X-Forwarded-For sets `request.ip` (and so the per-address limit); absent: none. */
  trustProxy?: TrustProxy
}

/**
 * A reconnect storm is tens of thousands of requests a minute, and a line for each buries
 * everything else: the plugin logs one summary per window, and Fastify logs no line per request —
 * not even per request refused while closing.
 */
class QuietLogController extends LogController {
  constructor () {
    super({ disableRequestLogging: true })
  }

  override serviceUnavailable (): void {}
}

/**
 * Tower's own registry (not prom-client's global one) with the plugin's metrics and Node's, or null
 * when prom-client is not installed: it is an optional peer of the package, so the `tower` bin runs
 * without it and /metrics says how to turn it on.
 */
function metricsRegistry (): Registry | null {
  const prom = requireOptional<typeof import('prom-client')>('prom-client')
  if (prom === null) return null
  const registry = new prom.Registry()
  prom.collectDefaultMetrics({ register: registry })
  return registry
}

/**
 * Tower is one user's workstation, behind its request guard: a stream's `?topics=` (workspaces)
 * narrows what it gets, and without one it gets every event (the dashboard shows them all).
 */
const workspaces = topicsFromQuery({ allow: () => true })
const towerTopics: TopicsFromRequest = (request) => workspaces(request) ?? ALL_TOPICS

/**
 * The Tower server: tower-sse at GET /api/events, POST /api/notify, GET /api/events/stats,
 * GET /api/ready, GET /metrics and the dashboard, every route behind the request guard. Returns the instance
 * unstarted; the caller listens (and closes).
 */
export function buildTower (options: TowerAppOptions = {}): FastifyInstance {
  const requestTimeoutMs = options.requestTimeoutMs ?? TOWER_DEFAULTS.requestTimeoutMs
  const app = Fastify({
    logger: options.logger ?? true,
    logController: new QuietLogController(),
    // During close every route still answers: the stream route with its own "closing" refusal
    // (Retry-After, counted), the others as usual, rather than Fastify's bare 503.
    return503OnClosing: false,
    // Node answers 408 and closes a request whose headers or body are not in by then; a request
    // is complete once read, so a stream is never cut by it. Node checks every so often (30 s by
    // default): often enough here that the bound holds.
    requestTimeout: requestTimeoutMs,
    http: { headersTimeout: requestTimeoutMs, connectionsCheckingInterval: Math.min(1000, requestTimeoutMs) },
    // Fastify's defaults would turn {"type": 5} into "5" and silently drop unknown properties.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false } },
    // Only the named proxies' X-Forwarded-For counts: anyone else could send one.
    trustProxy: options.trustProxy === undefined ? false : [...options.trustProxy]
  })
  guardRequests(app, { allowedHosts: [...DEFAULT_ALLOWED_HOSTS, ...(options.allowedHosts ?? [])], token: options.token })
  const metrics = metricsRegistry()
  void app.register(towerSse, {
    ...options.sse,
    initialEvent: (client) => ({ data: { type: 'connected', id: client.id } }),
    topicsFromRequest: options.sse?.topicsFromRequest ?? towerTopics,
    ...(metrics === null ? {} : { metrics })
  })
  if (metrics === null) {
    app.get(TOWER_ROUTES.metrics, async () => { throw new TowerMetricsUnavailableError() })
  } else {
    const { metricsRoute } = require('./metrics-route') as typeof import('./metrics-route')
    void app.register(metricsRoute, { registry: metrics })
  }
  // Keys are the token holder's: another producer's same key does not collide with them.
  const scope = options.token === undefined ? 'tower:no-token' : `tower:${createHash('sha256').update(options.token).digest('hex')}`
  void app.register(notifyRoute, { scope })
  void app.register(readyRoute)
  // The instance board shares the bus's Redis and key (a client passed in has no URL: no board).
  const redis = options.sse?.redis
  const group = typeof redis === 'object' && !('duplicate' in redis) ? redis : undefined
  void app.register(statsRoute, {
    redis: typeof redis === 'string' ? redis : group?.url,
    redisKey: group?.key ?? DEFAULTS.redis.key,
    random: Math.random
  })
  void app.register(staticAssets)
  return app
}
