import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { isAllowedHost, parseHost } from '../admission/request-guard'
import { TowerCrossSiteError, TowerHostNotAllowedError, TowerTokenRequiredError } from './errors'

/** Always answered: a page can only reach these names from this machine. */
export const DEFAULT_ALLOWED_HOSTS: readonly string[] = Object.freeze(['localhost', '*.localhost', '127.0.0.1', '[::1]'])

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
