/**
 * Where Redis is, parsed from the one URL the `redis` option and Tower's --redis take:
 * `redis://` / `rediss://` (one server), or the Sentinel form
 * `redis+sentinel://[user:pass@]host:port[,host:port…]/mastername[?db=N&sentinelUsername=…&sentinelPassword=…]`
 * (`rediss+sentinel://` for TLS to the sentinels and the primary). The sentinels name the primary,
 * and ioredis follows it through a failover. The Cluster form
 * `redis+cluster://[user:pass@]host:port[,host:port…]` (`rediss+cluster://` for TLS) names some of
 * a Redis Cluster's nodes; ioredis learns the others and follows MOVED and ASK.
 */
export type RedisTarget =
  | { kind: 'server', url: string }
  | {
    kind: 'sentinel'
    sentinels: Array<{ host: string, port: number }>
    name: string
    tls: boolean
    db: number
    username?: string
    password?: string
    sentinelUsername?: string
    sentinelPassword?: string
  }
  | { kind: 'cluster', nodes: Array<{ host: string, port: number }>, tls: boolean, username?: string, password?: string }

/**
 * A URL that is not one of the forms above. `expected` completes "must be …" and names what is
 * wrong (never a password); the option check wraps it in the plugin's coded option error.
 */
export class RedisUrlError extends Error {
  constructor (readonly expected: string) {
    super(`the Redis URL must be ${expected}`)
    this.name = 'RedisUrlError'
  }
}

const SENTINEL_URL = 'a redis+sentinel:// URL'
const CLUSTER_URL = 'a redis+cluster:// URL'
const CLUSTER_SCHEMES = new Map([['redis+cluster:', false], ['rediss+cluster:', true]])

const SENTINEL_SCHEMES = new Map([['redis+sentinel:', false], ['rediss+sentinel:', true]])
const SENTINEL_PARAMS = new Set(['db', 'sentinelUsername', 'sentinelPassword'])
/** Redis's `databases` setting is a C int; which numbers exist is the server's to say. */
const MAX_DB = 2 ** 31 - 1
// A master name as sentinel.conf accepts it: no spaces or slashes (it sits in a config line).
const MASTER_NAME = /^[A-Za-z0-9._:-]{1,100}$/
const HOST_PORT = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/

// A scheme as RFC 3986 spells it, bounded: all of an invalid URL that may be shown.
const SHOWN_SCHEME = /^[A-Za-z][A-Za-z0-9+.-]{0,31}:(\/\/)?/
// A query parameter named like a password (ioredis reads `?password=` too), matched once decoded.
const PASSWORD_PARAM = /password/i

/**
 * The URL as it may be shown in a log line or an error: the whole userinfo (everything before the
 * last `@` of the authority, as the URL parsers read it, so a password holding `@` or `:` is hidden
 * entire) and every password parameter replaced by `***`. A URL that is not valid is shown as its
 * scheme only: where its userinfo ends cannot be known.
 */
export function redactRedisUrl (url: string): string {
  let target: RedisTarget
  try {
    target = parseRedisUrl(url)
  } catch {
    return `${SHOWN_SCHEME.exec(url)?.[0] ?? ''}…`
  }
  const start = url.indexOf('//') + 2
  // The authority ends where WHATWG's URL parser ends it, or where the Sentinel form's parser does.
  const end = target.kind === 'server' ? indexOfAny(url, '/?#', start) : indexOfAny(url, '/', start)
  const at = url.lastIndexOf('@', end - 1)
  const head = at < start ? url.slice(0, end) : `${url.slice(0, start)}***${url.slice(at, end)}`
  const rest = url.slice(end)
  const query = rest.indexOf('?')
  if (query === -1) return head + rest
  // A fragment is not split off: the Sentinel form's parser reads a `#` as part of a value.
  const params = rest.slice(query + 1).split('&').map((param) => {
    const name = new URLSearchParams(param).keys().next().value
    return name !== undefined && PASSWORD_PARAM.test(name) ? `${param.split('=', 1)[0]}=***` : param
  })
  return `${head}${rest.slice(0, query + 1)}${params.join('&')}`
}

function indexOfAny (text: string, chars: string, from: number): number {
  for (let i = from; i < text.length; i++) if (chars.includes(text[i])) return i
  return text.length
}

function decode (form: string, what: string, text: string): string {
  try {
    return decodeURIComponent(text)
  } catch {
    throw new RedisUrlError(`${form} with valid percent-encoding in its ${what}`)
  }
}

/** `[user[:pass]@]host:port[,host:port…]` of the Sentinel and Cluster forms: the credentials and the hosts. */
function parseAuthority (form: string, what: string, authority: string): { hosts: Array<{ host: string, port: number }>, username?: string, password?: string } {
  const at = authority.lastIndexOf('@')
  const parsed: { hosts: Array<{ host: string, port: number }>, username?: string, password?: string } = { hosts: [] }
  if (at !== -1) {
    const userinfo = authority.slice(0, at)
    const colon = userinfo.indexOf(':')
    const username = decode(form, 'user name', colon === -1 ? userinfo : userinfo.slice(0, colon))
    if (username !== '') parsed.username = username
    if (colon !== -1) parsed.password = decode(form, 'password', userinfo.slice(colon + 1))
  }
  for (const entry of authority.slice(at + 1).split(',')) {
    const match = HOST_PORT.exec(entry)
    if (match === null) throw new RedisUrlError(`${form} whose ${what}s are host:port, not ${JSON.stringify(entry)}`)
    const port = Number(match[2])
    if (port < 1 || port > 65535) throw new RedisUrlError(`${form} whose ${what} ports are 1-65535, not ${JSON.stringify(entry)}`)
    parsed.hosts.push({ host: match[1].replace(/^\[|\]$/g, ''), port })
  }
  return parsed
}

/** Validates the URL; throws RedisUrlError naming what is wrong. */
export function parseRedisUrl (url: string): RedisTarget {
  const scheme = /^([a-z+]+:)\/\//i.exec(url)?.[1].toLowerCase()
  if (scheme === 'redis:' || scheme === 'rediss:') {
    try {
      // Only checked here; ioredis parses the URL itself.
      void new URL(url)
    } catch {
      throw new RedisUrlError(`a valid ${scheme}// URL`)
    }
    return { kind: 'server', url }
  }
  const clusterTls = scheme === undefined ? undefined : CLUSTER_SCHEMES.get(scheme)
  if (clusterTls !== undefined) {
    // Nothing after the nodes: a cluster has no database but 0 and no master name.
    const authority = url.slice(scheme?.length ?? 0).slice(2).replace(/\/$/, '')
    if (/[/?#]/.test(authority.slice(authority.lastIndexOf('@') + 1))) throw new RedisUrlError(`${CLUSTER_URL} with nothing after its nodes (no path, no parameters)`)
    const { hosts, username, password } = parseAuthority(CLUSTER_URL, 'node', authority)
    return { kind: 'cluster', nodes: hosts, tls: clusterTls, ...(username === undefined ? {} : { username }), ...(password === undefined ? {} : { password }) }
  }
  const tls = scheme === undefined ? undefined : SENTINEL_SCHEMES.get(scheme)
  if (tls === undefined) throw new RedisUrlError('a redis://, rediss://, redis+sentinel:// or redis+cluster:// URL')
  const rest = url.slice(scheme?.length ?? 0).slice(2)
  const slash = rest.indexOf('/')
  if (slash === -1) throw new RedisUrlError(`${SENTINEL_URL} with /mastername after the sentinels`)
  const [path, query = ''] = rest.slice(slash + 1).split(/\?(.*)/s, 2)
  const { hosts, username, password } = parseAuthority(SENTINEL_URL, 'sentinel', rest.slice(0, slash))
  const target: Extract<RedisTarget, { kind: 'sentinel' }> = { kind: 'sentinel', sentinels: hosts, name: '', tls, db: 0 }
  if (username !== undefined) target.username = username
  if (password !== undefined) target.password = password
  target.name = decode(SENTINEL_URL, 'master name', path)
  if (!MASTER_NAME.test(target.name)) throw new RedisUrlError(`${SENTINEL_URL} whose master name is 1-100 characters of A-Z a-z 0-9 . _ : -, not ${JSON.stringify(target.name)}`)
  for (const [key, value] of new URLSearchParams(query)) {
    if (!SENTINEL_PARAMS.has(key)) throw new RedisUrlError(`${SENTINEL_URL} with no parameters besides ${[...SENTINEL_PARAMS].join(', ')}, not ${JSON.stringify(key)}`)
    if (key === 'db') {
      const db = Number(value)
      if (!/^\d+$/.test(value) || db > MAX_DB) throw new RedisUrlError(`${SENTINEL_URL} whose db is an integer between 0 and ${MAX_DB}, not ${JSON.stringify(value)}`)
      target.db = db
    } else if (key === 'sentinelUsername') target.sentinelUsername = value
    else target.sentinelPassword = value
  }
  return target
}
