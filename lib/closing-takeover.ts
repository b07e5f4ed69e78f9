import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'

type RequestListener = (req: IncomingMessage, res: ServerResponse) => void

/**
 * Fastify's closing flag. Once `close()` starts, Fastify's router answers every request itself
 * (`return503OnClosing`: a bare 503 with a length, no Retry-After) before any route hook runs, so
 * the stream route's own refusal never would. The flag lives under the instance's
 * `Symbol('fastify.state')` (Fastify 4 and 5).
 */
function fastifyState (fastify: FastifyInstance): { closing?: boolean } | undefined {
  for (let proto: object | null = fastify; proto !== null; proto = Object.getPrototypeOf(proto)) {
    const symbol = Object.getOwnPropertySymbols(proto).find((s) => s.description === 'fastify.state')
    if (symbol !== undefined) return (proto as Record<symbol, { closing?: boolean }>)[symbol]
  }
  return undefined
}

/**
 * Puts the plugin's "shutting down" refusal (Retry-After, counted, server closes first) in front
 * of Fastify's own closing 503 for GET requests to the stream path; every other request still goes
 * to Fastify's handler unchanged.
 */
export function takeOverClosingRequests (
  fastify: FastifyInstance,
  path: string,
  refuse: (res: ServerResponse) => void
): void {
  const server = fastify.server
  const handlers = server.listeners('request') as RequestListener[]
  const state = fastifyState(fastify)
  // Not a Fastify we know (or a serverFactory that calls the handler itself): leave it as it is.
  if (handlers.length === 0 || state === undefined) return
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
