import { createHash, timingSafeEqual } from 'node:crypto'
import { isIPv6 } from 'node:net'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { TowerCrossSiteError, TowerHostNotAllowedError, TowerTokenRequiredError } from './errors'

/** Always answered: a page can only reach these names from this machine. */
export const DEFAULT_ALLOWED_HOSTS: readonly string[] = Object.freeze(['localhost', '*.localhost', '127.0.0.1', '[::1]'])

/** Letters, digits, `-` and `_` labels joined by dots (IPv4 addresses included); lower case. */
const HOST_NAME = /^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$/

/**
 * The host name of a Host header (or of an allowlist entry, `withPort` false): lower case,
 * without the port or a trailing dot, an IPv6 address in brackets. null when it is missing or
 * anything but one well-formed host — the request is then refused, never guessed at.
 */
export function parseHost (value: string | undefined, withPort = true): string | null {
  if (value === undefined) return null
  const text = value.toLowerCase()
  let host: string
  let rest: string
  if (text.startsWith('[')) {
    const close = text.indexOf(']')
    if (close === -1 || !isIPv6(text.slice(1, close))) return null
    host = text.slice(0, close + 1)
    rest = text.slice(close + 1)
  } else {
    const colon = text.indexOf(':')
    host = colon === -1 ? text : text.slice(0, colon)
    rest = colon === -1 ? '' : text.slice(colon)
    if (host.endsWith('.')) host = host.slice(0, -1)
    if (!HOST_NAME.test(host)) return null
  }
  if (rest === '') return host
  return withPort && /^:\d{1,5}$/.test(rest) ? host : null
}

/**
 * Reads one allowlist entry: a host name or address, `[v6]` or a bare IPv6 address, `*.domain`
 * for every name under the domain, or `*` for any host. Returns the normalised entry, or null.
 */
export function parseAllowedHost (entry: string): string | null {
  const text = entry.trim()
  if (text === '*') return text
  if (text.startsWith('*.')) {
    const domain = parseHost(text.slice(2), false)
    return domain === null || domain.startsWith('[') ? null : `*.${domain}`
  }
  return parseHost(isIPv6(text) ? `[${text}]` : text, false)
}

/** Whether `host` (from parseHost) is on the list (of parseAllowedHost entries). */
export function isAllowedHost (host: string, allowed: readonly string[]): boolean {
  return allowed.some((entry) => entry === '*' || entry === host ||
    (entry.startsWith('*.') && host.endsWith(entry.slice(1))))
}

export interface RequestGuardOptions {
  /** Every host to answer (see parseAllowedHost), defaults included. */
  allowedHosts: readonly string[]
  /** When set, a state-changing request needs `Authorization: Bearer <token>`. */
  token?: string
}

// Requests that read; everything else may change something and gets the stricter checks.
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])

function describe (value: string): string {
  return JSON.stringify(value.length > 100 ? `${value.slice(0, 100)}…` : value)
}

/** Constant-time: the digests are compared, so neither the length nor any prefix leaks. */
function tokenMatches (header: string | undefined, expected: Buffer): boolean {
  const match = /^bearer +(\S+) *$/i.exec(header ?? '')
  return match !== null && timingSafeEqual(createHash('sha256').update(match[1]).digest(), expected)
}

/** A browser request from a page of another site: its Origin is not an allowed host, or it says so. */
function crossSiteOrigin (request: FastifyRequest, allowed: readonly string[]): string | null {
  if (request.headers['sec-fetch-site'] === 'cross-site') return request.headers.origin ?? 'Sec-Fetch-Site: cross-site'
  const origin = request.headers.origin
  if (origin === undefined) return null
  let host: string | null = null
  try {
    host = parseHost(new URL(origin).host)
  } catch {
    // "null" (sandboxed frames, file: pages) and anything else unparseable.
  }
  return host !== null && isAllowedHost(host, allowed) ? null : origin
}

/**
 * Tower's guards, as one onRequest hook on the root instance so that every route — those to come
 * included, and 404s — is behind them:
 * - a Host that is not allowed → 403 (a DNS-rebinding page sends its own name as Host);
 * - a state-changing request from a page of another site → 403 (cross-site request forgery);
 * - with a token, a state-changing request without it → 401.
 */
export function guardRequests (app: FastifyInstance, options: RequestGuardOptions): void {
  const allowed = options.allowedHosts
  const expected = options.token === undefined ? null : createHash('sha256').update(options.token).digest()
  app.addHook('onRequest', (request, reply, done) => {
    const raw = request.headers.host
    const host = parseHost(raw)
    if (host === null || !isAllowedHost(host, allowed)) {
      done(new TowerHostNotAllowedError(raw === undefined ? '(none)' : describe(raw)))
      return
    }
    if (SAFE_METHODS.has(request.method)) {
      done()
      return
    }
    const origin = crossSiteOrigin(request, allowed)
    if (origin !== null) {
      done(new TowerCrossSiteError(describe(origin)))
      return
    }
    if (expected !== null && !tokenMatches(request.headers.authorization, expected)) {
      void reply.header('www-authenticate', 'Bearer realm="tower"')
      done(new TowerTokenRequiredError())
      return
    }
    done()
  })
}
