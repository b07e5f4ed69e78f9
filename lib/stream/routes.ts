import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler, RouteOptions } from 'fastify'
import { UNDER_PRESSURE_ROUTE_CONFIG } from '../admission/under-pressure'
import { TowerSseOptionError } from '../errors'
import type { NormalizedOptions } from '../options'
import type { TakeOverRoute } from '../platform/request-takeover'
import type { StreamOpener, StreamRouteOptions, SubscribeOptions } from './open'

/** `reply.eventStream` on a stream route. */
export interface EventStreamReply {
  /**
   * Opens this request's event stream (after the route's own hooks, so `request.user` is there):
   * resolves once the reply is taken over: the stream open, refused (503/429, perhaps held in
   * the tarpit first) or answered for HEAD; rejects, with nothing written, when a hook or callback
   * throws or the first event cannot be encoded (return it from the handler: a 500 through the app's error handler).
   */
  subscribe: (options?: SubscribeOptions) => Promise<void>
}

/** The route option: `eventStream: true`, or the route's own hooks. */
export type EventStreamRouteOption = boolean | StreamRouteOptions

/** Where a stream route keeps its settings: its config, which Fastify hands to every request of it. */
const ROUTE_SETTINGS = Symbol('tower-sse.route')
const ROUTE_HOOKS = ['keyFn', 'topicsFromRequest', 'initialEvent'] as const

/**
 * Makes stream routes of the routes declared (after the plugin) in its context and below that
 * carry the route option `eventStream`, and adds the plugin's own at `path` unless it is false.
 * A stream route gets `onRequest` hooks ahead of its own: `guards` first (a per-request check
 * every stream route must pass, such as a Host/Origin guard), then admission's cheap early check.
 * `owns(instance)` says whether a route's context belongs to this registration: one registered
 * deeper down owns the routes there. `closing` (when Fastify answers requests itself during close)
 * learns each stream route, so that it gets the plugin's refusal then.
 */
export function addStreamRoutes (
  fastify: FastifyInstance,
  opener: StreamOpener,
  options: NormalizedOptions,
  early: readonly onRequestHookHandler[],
  owns: (instance: FastifyInstance) => boolean,
  closing: TakeOverRoute | null
): void {
  fastify.decorateReply('eventStream', {
    getter (this: FastifyReply): EventStreamReply {
      return { subscribe: (asked) => opener.open(this.request, this, settingsOf(this.request), asked) }
    }
  })
  fastify.addHook('onRoute', function (this: FastifyInstance, route: RouteOptions & { eventStream?: unknown }) {
    const setting = route.eventStream
    if (setting === undefined || setting === false || !owns(this)) return
    const settings = routeSettings(setting, `${String(route.method)} ${route.url}`)
    const own = route.onRequest === undefined ? [] : Array.isArray(route.onRequest) ? route.onRequest : [route.onRequest]
    route.onRequest = [...early, ...own]
    // under-pressure's per-route handler first (the app's own config wins): admission answers pressure itself.
    route.config = { ...UNDER_PRESSURE_ROUTE_CONFIG, ...route.config, [ROUTE_SETTINGS]: settings } as RouteOptions['config']
    closing?.(Array.isArray(route.method) ? route.method : [route.method], route.url, route.constraints)
  })
  if (options.path === false) return
  fastify.route({
    method: ['GET', 'HEAD'],
    url: options.path,
    eventStream: true,
    handler: (_request, reply) => reply.eventStream.subscribe()
  })
}

function settingsOf (request: FastifyRequest): StreamRouteOptions {
  const settings = (request.routeOptions.config as unknown as Record<symbol, StreamRouteOptions | undefined>)[ROUTE_SETTINGS]
  if (settings === undefined) {
    throw new TypeError(`tower-sse: reply.eventStream.subscribe() needs a stream route: add the route option eventStream: true to ${request.method} ${request.routeOptions.url ?? request.url}`)
  }
  return settings
}

/** Checks a route's `eventStream` option once, when the route is declared. */
function routeSettings (setting: unknown, route: string): StreamRouteOptions {
  if (setting === true) return {}
  const option = `eventStream of ${route}`
  if (typeof setting !== 'object' || setting === null) throw new TowerSseOptionError(option, setting, `true or { ${ROUTE_HOOKS.join(', ')} }`)
  const given = setting as Record<string, unknown>
  for (const [name, value] of Object.entries(given)) {
    if (!(ROUTE_HOOKS as readonly string[]).includes(name)) throw new TowerSseOptionError(`${option}: ${name}`, value, `one of ${ROUTE_HOOKS.join(', ')}`)
    if (value !== undefined && typeof value !== 'function') throw new TowerSseOptionError(`${option}: ${name}`, value, 'a function')
  }
  return { ...given }
}
