import type { FastifyRequest } from 'fastify'

export type KeyFn = (request: FastifyRequest) => string

const CLIENT_ID = /^[\x21-\x7e]{1,128}$/

/**
 * Whose stream this is, for `maxClientsPerKey`: on a workstation everything comes from 127.0.0.1,
 * so a tool that names itself (`X-Client-Id` header or `clientId` query parameter, printable ASCII,
 * at most 128 characters) is counted by that name; anything else by its remote address.
 */
export const defaultKeyFn: KeyFn = (request) => {
  const header = request.headers['x-client-id']
  if (typeof header === 'string' && CLIENT_ID.test(header)) return `id:${header}`
  const query = (request.query as Record<string, unknown> | undefined)?.clientId
  if (typeof query === 'string' && CLIENT_ID.test(query)) return `id:${query}`
  return `ip:${request.ip}`
}
