import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import type FindMyWayRouter from 'find-my-way'
import { answers503OnClosing, fastifyState, FindMyWay, routerRules } from './internals'

type RequestListener = (req: IncomingMessage, res: ServerResponse) => void

/** Adds a stream route to the closing takeover: its methods, its full URL (prefix included), its constraints. */
export type TakeOverRoute = (methods: readonly string[], url: string, constraints: Record<string, unknown> | undefined) => void

/**
 * Puts the plugin's "shutting down" refusal (Retry-After, counted, server closes first) in front
 * of Fastify's own closing 503 for the stream routes added with the function it returns: matched
 * by a find-my-way router with Fastify's own rules, so a prefix, parameters and constraints match
 * as Fastify would; every other request still goes to Fastify's handler unchanged. Only needed
 * where the app keeps `return503OnClosing` (Fastify's default): with it off, Fastify routes
 * requests during close and admission refuses them itself. Returns null where it leaves the
 * server as it is.
 */
export function takeOverClosingRequests (fastify: FastifyInstance, refuse: (res: ServerResponse) => void): TakeOverRoute | null {
  const server = fastify.server
  const handlers = server.listeners('request') as RequestListener[]
  const state = fastifyState(fastify)
  const rules = routerRules(fastify)
  // Not a Fastify we know (or a serverFactory that calls the handler itself), or one that lets
  // routes answer during close (admission refuses there itself): leave it as it is.
  if (handlers.length === 0 || state === undefined || rules === undefined || !answers503OnClosing(fastify)) return null
  const toFastify: RequestListener = (req, res) => {
    for (const handler of handlers) handler(req, res)
  }
  const streams = FindMyWay({ ...rules, defaultRoute: toFastify })
  for (const handler of handlers) server.removeListener('request', handler)
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (state.closing === true) streams.lookup(req, res)
    else toFastify(req, res)
  })
  return (methods, url, constraints) => {
    // HEAD takes no slot: Fastify's answer is as good as a refusal.
    const refused = methods.filter((method) => method !== 'HEAD') as FindMyWayRouter.HTTPMethod[]
    if (refused.length === 0) return
    try {
      streams.on(refused, url, { constraints: constraints ?? {} }, (_req, res) => refuse(res as ServerResponse))
    } catch {
      // A constraint strategy added to Fastify after it was built is unknown here: that route keeps Fastify's closing 503.
    }
  }
}
