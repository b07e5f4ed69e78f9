import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { answers503OnClosing, fastifyState } from './internals'

type RequestListener = (req: IncomingMessage, res: ServerResponse) => void

/**
 * Puts the plugin's "shutting down" refusal (Retry-After, counted, server closes first) in front
 * of Fastify's own closing 503 for GET requests to the stream path; every other request still goes
 * to Fastify's handler unchanged. Only needed where the app keeps `return503OnClosing` (Fastify's
 * default): with it off, Fastify routes requests during close and admission refuses them itself.
 */
export function takeOverClosingRequests (
  fastify: FastifyInstance,
  path: string,
  refuse: (res: ServerResponse) => void
): void {
  const server = fastify.server
  const handlers = server.listeners('request') as RequestListener[]
  const state = fastifyState(fastify)
  // Not a Fastify we know (or a serverFactory that calls the handler itself), or one that lets
  // routes answer during close (admission refuses there itself): leave it as it is.
  if (handlers.length === 0 || state === undefined || !answers503OnClosing(fastify)) return
  for (const handler of handlers) server.removeListener('request', handler)
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (state.closing === true && req.method === 'GET' && pathOf(req.url) === path) {
      refuse(res)
      return
    }
    for (const handler of handlers) handler(req, res)
  })
}

function pathOf (url: string | undefined): string {
  const raw = url ?? '/'
  const query = raw.indexOf('?')
  return query === -1 ? raw : raw.slice(0, query)
}
