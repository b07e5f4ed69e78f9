import type { FastifyRequest } from 'fastify'

/** Whose stream a request is, for maxClientsPerKey; it may be async (runs after the route's own hooks). */
export type KeyFn = (request: FastifyRequest) => string | PromiseLike<string>

const CLIENT_ID = /^[\x21-\x7e]{1,128}$/

/**
 * Whose stream this is, for `maxClientsPerKey`: the client address as Fastify resolves it
 * (`request.ip`, which honours Fastify's `trustProxy`). Nothing the client sends chooses it, so a
 * client cannot dodge its cap by naming itself anew; behind a proxy, set `trustProxy` to the
 * proxy's address or every client is the proxy.
 */
export const defaultKeyFn = (request: FastifyRequest): string => `ip:${request.ip}`

/**
 * Opt-in: a client that names itself (`X-Client-Id` header or `clientId` query parameter, printable
 * ASCII, at most 128 characters) is counted by that name; anything else by its address. Anyone can
 * send any name, so this only fits when every caller is trusted (tools on one workstation) or
 * when a proxy or an auth hook in front sets the header from an authenticated identity.
 */
export const keyFromClientId = (request: FastifyRequest): string => {
  const header = request.headers['x-client-id']
  if (typeof header === 'string' && CLIENT_ID.test(header)) return `id:${header}`
  const query = (request.query as Record<string, unknown> | undefined)?.clientId
  if (typeof query === 'string' && CLIENT_ID.test(query)) return `id:${query}`
  return defaultKeyFn(request)
}
