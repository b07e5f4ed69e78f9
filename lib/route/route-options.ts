import type { FastifyRequest } from 'fastify'
import type { SseEventInit } from '../events/encoder'
import type { SseClientInfo } from '../streams/subscriber'
import { defaultKeyFn, type KeyFn } from '../admission/request-key'
import { optionalFunction, TowerSseOptionError } from '../shared/option-rules'
import type { TopicsFromRequest } from './stream-request'

/** Builds a new client's first event, before any byte of its stream is written (undefined: none); it may be async. */
export type InitialEvent = (client: SseClientInfo, request: FastifyRequest) => SseEventInit | undefined | PromiseLike<SseEventInit | undefined>

/** The hooks a stream route may set for itself (the route option `eventStream: { … }`); the plugin's fill the rest. */
export interface StreamRouteOptions {
  /** Whose stream a request is, for `maxClientsPerKey` and `send`/`close({ key })`; default: the client's address. */
  keyFn?: KeyFn
  /** The topics a request is granted beyond the untopiced events; default: none. */
  topicsFromRequest?: TopicsFromRequest
  /** The first event a new stream receives. */
  initialEvent?: InitialEvent
}

/** The route concern's options: where the plugin's own stream route is, and the hooks every stream route shares. */
export interface RouteOptions extends StreamRouteOptions {
  /** Path of the plugin's own stream route (GET and HEAD); false: none, your routes only (`eventStream: true`). */
  path?: string | false
}

export interface RouteSettings {
  path: string | false
  keyFn: KeyFn
  topicsFromRequest: TopicsFromRequest | undefined
  initialEvent: InitialEvent | undefined
}

export const ROUTE_DEFAULTS = Object.freeze({ path: '/api/events' as string | false })

export const ROUTE_HOOKS = ['keyFn', 'topicsFromRequest', 'initialEvent'] as const

const HOOK_SHAPES: Record<typeof ROUTE_HOOKS[number], string> = {
  keyFn: 'a function (request) => string',
  topicsFromRequest: 'a function (request) => topics',
  initialEvent: 'a function (client, request) => event'
}

// What a URL path carries unencoded (RFC 3986 pchar), less `%` and `*`. Fastify matches a route
// against the decoded path, so a route with `%`, `?` or `#` in it, or a `.`/`..` segment, is never
// reached; `*` would make it a wildcard; a space or non-ASCII character is sent encoded by every client.
const URL_PATH = /^\/[A-Za-z0-9\-._~!$&'()+,;=:@/]*$/

function parsePath (value: unknown): string | false {
  const path = value === undefined ? ROUTE_DEFAULTS.path : value
  if (path !== false && (typeof path !== 'string' || !URL_PATH.test(path) || path.split('/').some((segment) => segment === '.' || segment === '..'))) {
    throw new TowerSseOptionError('path', path, 'a URL path as sent on the wire: "/" then A-Z a-z 0-9 and - . _ ~ ! $ & \' ( ) + , ; = : @ / ' +
      '(no space, ?, #, %, *, non-ASCII, or "." and ".." segments)')
  }
  return path
}

/** The hooks of `given` (the plugin's options, or a route's `eventStream: { … }` under `name`), each checked to be a function. */
export function parseRouteHooks (given: Record<string, unknown>, name = ''): StreamRouteOptions {
  const hooks: StreamRouteOptions = {}
  for (const hook of ROUTE_HOOKS) {
    const value = optionalFunction<never>(`${name}${hook}`, given[hook], HOOK_SHAPES[hook])
    if (value !== undefined) hooks[hook] = value
  }
  return hooks
}

export function parseRouteOptions (given: Record<string, unknown>): RouteSettings {
  const hooks = parseRouteHooks(given)
  return {
    path: parsePath(given.path),
    keyFn: hooks.keyFn ?? defaultKeyFn,
    topicsFromRequest: hooks.topicsFromRequest,
    initialEvent: hooks.initialEvent
  }
}
