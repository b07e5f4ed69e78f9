import type { FastifyRequest } from 'fastify'
import { addressKey, DEFAULT_ADDRESS_GROUPING, type AddressGrouping } from './address-key'
import { TowerSseOptionError } from '../errors'

/** Whose stream a request is, for maxClientsPerKey; it may be async (runs after the route's own hooks). */
export type KeyFn = (request: FastifyRequest) => string | PromiseLike<string>

const CLIENT_ID = /^[\x21-\x7e]{1,128}$/

/**
 * Whose stream this is, for `maxClientsPerKey`: the client address as Fastify resolves it
 * (`request.ip`, which honours Fastify's `trustProxy`). Nothing the client sends chooses it, so a
 * client cannot dodge its cap by naming itself anew, nor by the spellings of one address or the
 * addresses of one IPv6 /64 (address-key.ts); behind a proxy, set `trustProxy` to the proxy's
 * address or every client is the proxy.
 */
export const defaultKeyFn = (request: FastifyRequest): string => addressKey(request.ip)

/**
 * The default key with other address groups: `keyByAddress({ ipv6PrefixLength: 48 })` counts a
 * whole /48 as one client, `{ ipv6PrefixLength: 128 }` each IPv6 address (see address-key.ts).
 */
export function keyByAddress (grouping: Partial<AddressGrouping> = {}): (request: FastifyRequest) => string {
  const given = { ...DEFAULT_ADDRESS_GROUPING, ...grouping }
  for (const [name, max] of [['ipv4PrefixLength', 32], ['ipv6PrefixLength', 128]] as const) {
    const value: unknown = given[name]
    if (!Number.isSafeInteger(value) || (value as number) < 0 || (value as number) > max) {
      throw new TowerSseOptionError(`keyByAddress: ${name}`, value, `an integer between 0 and ${max}`)
    }
  }
  return (request) => addressKey(request.ip, given)
}

/**
 * Opt-in: a client that names itself (`X-Client-Id` header or `clientId` query parameter, printable
 * ASCII, at most 128 characters) is counted by that name within its address (`id:<name>@<address
 * key>`); anything else by its address alone. The address is part of the key because anyone can send
 * any name: a client elsewhere that names itself like another cannot receive `send({ key })` meant
 * for it nor use up its `maxClientsPerKey`. Only clients behind one address (one workstation, one
 * proxy without `trustProxy`) can share a name, so this fits where those are trusted, or where a
 * proxy or an auth hook in front sets the header from an authenticated identity.
 */
export const keyFromClientId = (request: FastifyRequest): string => {
  const address = defaultKeyFn(request)
  const header = request.headers['x-client-id']
  if (typeof header === 'string' && CLIENT_ID.test(header)) return `id:${header}@${address}`
  const query = (request.query as Record<string, unknown> | undefined)?.clientId
  if (typeof query === 'string' && CLIENT_ID.test(query)) return `id:${query}@${address}`
  return address
}
