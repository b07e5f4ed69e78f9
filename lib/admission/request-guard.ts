import type { onRequestHookHandler } from 'fastify'
import { isIPv6 } from 'node:net'
import { HostNotAllowedError, OriginNotAllowedError } from '../errors'
import { group, TowerSseOptionError } from '../shared/option-rules'

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

export interface StreamGuardOptions {
  /** Hosts to answer (parseAllowedHost entries); absent: any Host. */
  allowedHosts?: readonly string[]
  /** Exact origins (scheme + host + port) whose pages may open the stream; absent: any Origin. */
  allowedOrigins?: readonly string[]
}

/**
 * The guard's lists (the plugin's `guard` option, or streamGuard's argument, named `name`): each a
 * non-empty array of valid entries, or left out (no check).
 */
export function parseGuard (value: unknown, name = 'guard'): StreamGuardOptions {
  const given = group(name, value, ['allowedHosts', 'allowedOrigins']) ?? {}
  const guard: StreamGuardOptions = {}
  const hosts = list(`${name}.allowedHosts`, given.allowedHosts, (entry) => parseAllowedHost(entry) !== null, 'host names, IP addresses, *.domain or * (no port)')
  const origins = list(`${name}.allowedOrigins`, given.allowedOrigins, isExactOrigin, 'exact origins: scheme://host[:port], no path')
  if (hosts !== undefined) guard.allowedHosts = hosts
  if (origins !== undefined) guard.allowedOrigins = origins
  return guard
}

/** An origin as a browser sends it: `new URL()` gives it back unchanged (lower case, no default port, no path). */
function isExactOrigin (entry: string): boolean {
  try {
    const { origin } = new URL(entry)
    return origin !== 'null' && origin === entry
  } catch {
    return false
  }
}

function list (name: string, value: unknown, ok: (entry: string) => boolean, expected: string): readonly string[] | undefined {
  if (value === undefined) return undefined
  const bad = Array.isArray(value) ? value.find((entry) => typeof entry !== 'string' || !ok(entry)) : value
  if (!Array.isArray(value) || bad !== undefined || value.length === 0) {
    throw new TowerSseOptionError(name, Array.isArray(value) && bad !== undefined ? bad : value, `a non-empty array of ${expected}`)
  }
  return Object.freeze([...value as string[]])
}

function shown (value: string | undefined): string {
  if (value === undefined) return '(none)'
  return JSON.stringify(value.length > 100 ? `${value.slice(0, 100)}…` : value)
}

/**
 * The Host allowlist (DNS rebinding: a re-pointed name sends its own Host) and the exact-Origin
 * check (a page of another origin; `Origin: null` included), as one onRequest hook: the first
 * check of the plugin's stream route, before admission counts anything, and a hook an app puts on
 * its own routes too. A list left out is no check. A request without Origin (not a browser's
 * cross-origin one) passes the Origin check.
 */
export function streamGuard (options: StreamGuardOptions): onRequestHookHandler {
  const { allowedHosts, allowedOrigins } = parseGuard(options, 'streamGuard')
  const hosts = allowedHosts?.map((entry) => parseAllowedHost(entry) ?? entry)
  const origins = allowedOrigins === undefined ? undefined : new Set(allowedOrigins)
  return (request, _reply, done) => {
    if (hosts !== undefined) {
      const raw = request.headers.host
      const host = parseHost(raw)
      if (host === null || !isAllowedHost(host, hosts)) {
        done(new HostNotAllowedError(shown(raw)))
        return
      }
    }
    const origin = request.headers.origin
    if (origins !== undefined && origin !== undefined && !origins.has(origin)) {
      done(new OriginNotAllowedError(shown(origin)))
      return
    }
    done()
  }
}
