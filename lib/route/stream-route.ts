import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler, onSendHookHandler, RouteOptions } from 'fastify'
import { UNDER_PRESSURE_ROUTE_CONFIG } from '../admission/under-pressure'
import { StreamRouteOutsideError, SubscribeNotReturnedError, TowerSseOptionError } from '../errors'
import type { StreamStats } from '../observe/stats'
import type { TakeOverRoute } from '../platform/request-takeover'
import { rootOf } from '../platform/internals'
import type { StreamOpener, SubscribeOptions } from './open'
import type { StreamHandle } from './stream-handle'
import { parseRouteHooks, ROUTE_HOOKS, type StreamRouteOptions } from './route-options'

/** `reply.eventStream` on a stream route. */
export interface EventStreamReply {
  /**
   * Opens this request's event stream (after the route's own hooks, so `request.user` is there).
   * Resolves once the reply is taken over, with the stream's handle: open, or not opened (refused —
   * 503/429, perhaps held in the tarpit first —, a HEAD, its client gone). Rejects, with nothing
   * written, when a hook or callback throws or the first event cannot be encoded. Return it from the
   * handler: the rejection is then a 500 through the app's error handler.
   */
  subscribe: (options?: SubscribeOptions) => Promise<StreamHandle>
}

/** The route option: `eventStream: true`, or the route's own hooks. */
export type EventStreamRouteOption = boolean | StreamRouteOptions

/** Where a stream route keeps its settings: its config, which Fastify hands to every request of it. */
const ROUTE_SETTINGS = Symbol('tower-sse.route')
/** Roots already checking that every stream route has a tower-sse above it. */
const CHECKED_ROOTS = new WeakSet<FastifyInstance>()

/** What the stream routes of one registration share. */
export interface StreamRouteParts {
  opener: StreamOpener
  stats: StreamStats
  /** The plugin's own route (false: none). */
  path: string | false
  /** onRequest hooks every stream route runs first: the Host/Origin guard, then admission's early check. */
  first: readonly onRequestHookHandler[]
  /** Whether a route's context belongs to this registration (one registered deeper down owns the routes there). */
  owns: (instance: FastifyInstance) => boolean
  /** Learns each stream route, when Fastify answers requests itself during close (see platform/request-takeover.ts). */
  closing: TakeOverRoute | null
}

/**
 * Makes stream routes of the routes declared (after the plugin) in its context and below that
 * carry the route option `eventStream`, and adds the plugin's own at `path` unless it is false.
 * A stream route gets onRequest hooks ahead of its own (`first`) and an onSend hook that turns a
 * forgotten `return` into a 500 that says so. A stream route in a context with no tower-sse above
 * it is refused where it is declared.
 */
export function addStreamRoutes (fastify: FastifyInstance, parts: StreamRouteParts): void {
  const { opener, first, owns, closing } = parts
  fastify.decorateReply('eventStream', {
    getter (this: FastifyReply): EventStreamReply {
      return { subscribe: (asked) => opener.open(this.request, this, settingsOf(this.request), asked) }
    }
  })
  const notReturned = forgottenReturn(parts)
  fastify.addHook('onRoute', function (this: FastifyInstance, route: RouteOptions & { eventStream?: unknown }) {
    const setting = route.eventStream
    if (setting === undefined || setting === false || !owns(this)) return
    const settings = routeSettings(setting, `${String(route.method)} ${route.url}`)
    route.onRequest = [...first, ...asList(route.onRequest)]
    route.onSend = [notReturned, ...asList(route.onSend)]
    // under-pressure's per-route handler first (the app's own config wins): admission answers pressure itself.
    route.config = { ...UNDER_PRESSURE_ROUTE_CONFIG, ...route.config, [ROUTE_SETTINGS]: settings } as RouteOptions['config']
    closing?.(Array.isArray(route.method) ? route.method : [route.method], route.url, route.constraints)
  })
  refuseStreamRoutesOutside(rootOf(fastify))
  if (parts.path === false) return
  fastify.route({
    method: ['GET', 'HEAD'],
    url: parts.path,
    eventStream: true,
    handler: (_request, reply) => reply.eventStream.subscribe()
  })
}

/**
 * `async (request, reply) => { reply.eventStream.subscribe() }` — without `return`, and with any
 * callback async — lets Fastify answer the handler's undefined: an empty 200 no client can use. It
 * is answered 500 instead, logged once naming the fix, and counted as a failed open.
 */
function forgottenReturn ({ opener, stats }: StreamRouteParts): onSendHookHandler {
  return (request, reply, payload, done) => {
    if (!opener.answeredMidway(request)) {
      done(null, payload)
      return
    }
    const error = new SubscribeNotReturnedError(`${request.method} ${request.routeOptions.url ?? request.url}`)
    request.log.warn({ err: error }, error.message)
    stats.failedOpen()
    reply.code(500)
    reply.header('content-type', 'application/json; charset=utf-8')
    done(null, JSON.stringify({ statusCode: 500, code: error.code, error: 'Internal Server Error', message: error.message }))
  }
}

/**
 * A stream route declared where no tower-sse is registered above (a plugin file of its own,
 * encapsulated, beside the one that registers tower-sse) would answer every request with a 500 about
 * `undefined`. Fastify copies a context's onRoute hooks into every context created after them, so
 * one hook on the root sees the stream routes of contexts created after this registration.
 */
function refuseStreamRoutesOutside (root: FastifyInstance): void {
  if (CHECKED_ROOTS.has(root)) return
  CHECKED_ROOTS.add(root)
  root.addHook('onRoute', function (this: FastifyInstance, route: RouteOptions & { eventStream?: unknown }) {
    const setting = route.eventStream
    if (setting === undefined || setting === false) return
    if ((this as { sse?: unknown }).sse === undefined) throw new StreamRouteOutsideError(`${String(route.method)} ${route.url}`)
  })
}

function asList<T> (hooks: T | T[] | undefined): T[] {
  return hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks]
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
  }
  return parseRouteHooks(given, `${option}: `)
}
