import { closeSync, fstatSync, openSync, readSync } from 'node:fs'
import { DEFAULTS, normalizeOptions, type NormalizedOptions, type TowerSseOptions } from '../options'
import { TowerSseOptionError } from '../errors'
import { parseAllowedHost } from '../admission/request-guard'
import { redactRedisUrl } from '../bus/redis/url'
import { coveredFamilies, entrySpans, NAMED_RANGES } from './address-ranges'
import { TowerConfigError } from './errors'
import { TOWER_DEFAULTS, type TrustProxy } from './app'
import { LOG_FORMATS, type LogFormat } from './logging'
import { routeProblem } from './routes'
import { shadowedFileRoute } from './static-assets'

/** What `npm start` runs with: where to listen and the plugin options that were set. */
export interface TowerConfig {
  host: string
  port: number
  /** Only the options given by flag or environment; the plugin fills in the rest from DEFAULTS. */
  sse: TowerSseOptions
  /** Every plugin option in force, already validated by the plugin's own normalizeOptions. */
  limits: NormalizedOptions
  /** Hosts answered besides the defaults: those given, and the one Tower listens on. */
  allowedHosts: string[]
  /** When set, state-changing requests need `Authorization: Bearer <token>`. */
  token: string | undefined
  /** What the start-up should warn about (a secret given as a flag), one sentence each. */
  warnings: string[]
  requestTimeoutMs: number
  help: boolean
  /** Processes on node:cluster sharing the port; more than one needs the Redis bus. */
  workers: number
  /** Fastify's `trustProxy`: the proxies whose X-Forwarded-For is believed; undefined: none. */
  trustProxy: TrustProxy | undefined
  /** Forced by --log-format / TOWER_LOG_FORMAT; unset, chooseLogFormat decides from the terminal. */
  logFormat: LogFormat | undefined
}

export { TowerConfigError }

export const DEFAULT_HOST = '127.0.0.1'
export const DEFAULT_PORT = 4100
const ENV_PREFIX = 'TOWER_SSE_'
const MAX_WORKERS = 64

/** The plugin's option groups Tower sets one key at a time, and the keys of the one without defaults. */
type Group = 'storm' | 'connectRate' | 'history' | 'redis'
const CONNECT_RATE_KEYS = { perSecond: 'off', burst: 'perSecond' }

/** One settable plugin option (a group's key included), derived from DEFAULTS so that options added later work unchanged. */
interface OptionSpec {
  /** As the plugin names it in its errors: `maxClients`, `storm.tarpitMs`. */
  name: string
  group: Group | undefined
  key: string
  flag: string
  env: string
  integer: boolean
  /** The default, as --help shows it. */
  shown: string
}

const kebab = (name: string): string => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)
const snake = (name: string): string => name.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()

function spec (group: Group | undefined, key: string, value: unknown): OptionSpec {
  const name = group === undefined ? key : `${group}.${key}`
  const words = group === undefined ? [key] : [group, key]
  return {
    name,
    group,
    key,
    flag: `--${words.map(kebab).join('-')}`,
    env: ENV_PREFIX + words.map(snake).join('_'),
    integer: typeof value === 'number' || group === 'connectRate',
    shown: String(value)
  }
}

const OPTION_SPECS: readonly OptionSpec[] = Object.entries(DEFAULTS).flatMap(([key, value]) => {
  if (key === 'connectRate') return Object.entries(CONNECT_RATE_KEYS).map(([sub, shown]) => spec('connectRate', sub, shown))
  if (typeof value === 'object' && value !== null) return Object.entries(value).map(([sub, subValue]) => spec(key as Group, sub, subValue))
  return [spec(undefined, key, value)]
})

const INTEGER_TEXT = /^-?\d+$/

function parseInteger (source: string, text: string): number {
  const value = Number(text)
  if (!INTEGER_TEXT.test(text) || !Number.isSafeInteger(value)) {
    throw new TowerConfigError(`${source} must be an integer, got ${JSON.stringify(text)}`)
  }
  return value
}

function parsePort (source: string, text: string): number {
  const port = parseInteger(source, text)
  if (port < 0 || port > 65535) throw new TowerConfigError(`${source} must be a port between 0 and 65535, got ${port}`)
  return port
}

/** A listen address, checked by the one host parser the request guard uses (no wildcard here). */
function parseListenHost (source: string, text: string): string {
  const host = parseAllowedHost(text)
  if (host === null || host.startsWith('*')) throw new TowerConfigError(`${source} must be a host name or address, got ${JSON.stringify(text)}`)
  return text
}

function parseAllowedHosts (source: string, text: string): string[] {
  return text.split(',').filter((entry) => entry.trim() !== '').map((entry) => {
    const host = parseAllowedHost(entry)
    if (host === null) throw new TowerConfigError(`${source}: ${JSON.stringify(entry)} is not a host name, an IP address, *.domain or *`)
    return host
  })
}

// RFC 6750's token characters are narrower; what matters here is that it fits the header as is.
const TOKEN_TEXT = /^[\x21-\x7e]+$/

function parseToken (source: string, text: string): string {
  if (!TOKEN_TEXT.test(text)) throw new TowerConfigError(`${source} must be printable ASCII without spaces`)
  return text
}

// A token is one line; a bigger file is not one (and a device could go on for ever).
const MAX_TOKEN_FILE_BYTES = 4096
const FILE_ERRORS: Record<string, string> = { ENOENT: 'no such file', EACCES: 'permission denied', EISDIR: 'it is a directory' }

/**
 * `--token-file`: the token is the file's content less one trailing newline. The file must be
 * its owner's alone (no group or other permission, as ssh asks of a key): a token other local
 * users can read, or replace, stops none of them. A pipe (`--token-file <(pass show tower)`) is
 * its owner's too.
 */
function readTokenFile (source: string, file: string): string {
  const where = `${source} ${file}`
  let fd: number | undefined
  try {
    fd = openSync(file, 'r')
    const mode = fstatSync(fd).mode & 0o777
    if ((mode & 0o077) !== 0) {
      throw new TowerConfigError(`${where}: other users may read or change it (mode ${mode.toString(8)}); make it its owner's alone: chmod 600 ${file}`)
    }
    const buffer = Buffer.alloc(MAX_TOKEN_FILE_BYTES + 1)
    let length = 0
    for (let n = -1; n !== 0 && length < buffer.length; length += n) n = readSync(fd, buffer, length, buffer.length - length, null)
    if (length > MAX_TOKEN_FILE_BYTES) throw new TowerConfigError(`${where}: more than ${MAX_TOKEN_FILE_BYTES} bytes, not a token`)
    const token = buffer.toString('utf8', 0, length).replace(/\r?\n$/, '')
    if (token === '') throw new TowerConfigError(`${where}: the file is empty`)
    return parseToken(where, token)
  } catch (err) {
    if (err instanceof TowerConfigError) throw err
    const code = (err as NodeJS.ErrnoException).code ?? ''
    throw new TowerConfigError(`${where}: cannot read it: ${FILE_ERRORS[code] ?? (err as Error).message}`)
  } finally {
    if (fd !== undefined) closeSync(fd)
  }
}

/** Any user of the machine reads a process's command line (ps, /proc/<pid>/cmdline); not its environment. */
const VISIBLE_FLAG = 'is in the command line, which every local user can read (ps, /proc/<pid>/cmdline)'

function parseTimeout (source: string, text: string): number {
  const ms = parseInteger(source, text)
  if (ms < 1 || ms > 2 ** 31 - 1) throw new TowerConfigError(`${source} must be an integer between 1 and ${2 ** 31 - 1}, got ${ms}`)
  return ms
}

/**
 * `--trust-proxy`: addresses, CIDR ranges and proxy-addr's range names. Trusting every address of
 * a family would let any client choose its own address (and so its per-address limit) with a
 * forged X-Forwarded-For: that is refused, not merely warned about, however the ranges add up to
 * it (`0.0.0.0/1,128.0.0.0/1`, `::ffff:0.0.0.0/96`). So is a hop count: it cannot tell a proxy
 * from a client that sends enough entries (Fastify 5.12.8 trusts nobody when given one).
 */
function parseTrustProxy (source: string, text: string): TrustProxy {
  const everything = (why: string): string => `${source}: trusting every address lets any client choose its own address with X-Forwarded-For${why}; ` +
    'name the proxy\'s addresses (e.g. 127.0.0.1 or 10.0.0.0/8)'
  if (/^\s*(true|\*|everything|all)\s*$/i.test(text)) throw new TowerConfigError(everything(''))
  if (/^\s*\d+\s*$/.test(text)) {
    throw new TowerConfigError(`${source}: a hop count cannot tell a proxy from a client that sends X-Forwarded-For itself; name the proxy's addresses`)
  }
  const entries = text.split(',').map((entry) => entry.trim()).filter((entry) => entry !== '')
  if (entries.length === 0) throw new TowerConfigError(`${source} must be the proxy's addresses or CIDR ranges, got ${JSON.stringify(text)}`)
  const spans = entries.flatMap((entry) => {
    const found = entrySpans(entry)
    if (found === null) {
      throw new TowerConfigError(`${source}: ${JSON.stringify(entry)} is not an IP address, a CIDR range (address/bits) or one of ${[...NAMED_RANGES.keys()].join(', ')}`)
    }
    return found
  })
  const covered = coveredFamilies(spans)
  if (covered.length > 0) throw new TowerConfigError(everything(` (these ranges cover all of ${covered.join(' and ')})`))
  return entries
}

function parseLogFormat (source: string, text: string): LogFormat {
  const format = LOG_FORMATS.find((f) => f === text)
  if (format === undefined) throw new TowerConfigError(`${source} must be ${LOG_FORMATS.join(' or ')}, got ${JSON.stringify(text)}`)
  return format
}

/** Tower's own settings besides --host and --port (the plugin's options are OPTION_SPECS). */
const TOWER_SETTINGS = [
  { flag: '--allowed-hosts', env: 'TOWER_ALLOWED_HOSTS', value: '<list>', default: '(none)' },
  { flag: '--token', env: 'TOWER_TOKEN', value: '<token>', default: '(none)' },
  { flag: '--token-file', env: 'TOWER_TOKEN_FILE', value: '<path>', default: '(none)' },
  { flag: '--request-timeout-ms', env: 'TOWER_REQUEST_TIMEOUT_MS', value: '<integer>', default: String(TOWER_DEFAULTS.requestTimeoutMs) },
  { flag: '--trust-proxy', env: 'TOWER_TRUST_PROXY', value: '<list>', default: '(none)' },
  { flag: '--log-format', env: 'TOWER_LOG_FORMAT', value: LOG_FORMATS.join('|'), default: 'pretty on a terminal, else json' }
] as const

/** Reads `--flag value` and `--flag=value` pairs; anything else is an error naming it. */
function readFlags (argv: readonly string[]): { values: Map<string, string>, help: boolean } {
  const known = new Set(['--host', '--port', '--workers', '--redis', ...TOWER_SETTINGS.map((setting) => setting.flag), ...OPTION_SPECS.map((spec) => spec.flag)])
  const values = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (arg === '--help' || arg === '-h') return { values, help: true }
    if (!arg.startsWith('--')) throw new TowerConfigError(`unexpected argument ${JSON.stringify(arg)} (see --help)`)
    const eq = arg.indexOf('=')
    const flag = eq === -1 ? arg : arg.slice(0, eq)
    if (!known.has(flag)) throw new TowerConfigError(`unknown flag ${flag} (see --help)`)
    let value: string | undefined
    if (eq !== -1) {
      value = arg.slice(eq + 1)
    } else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) {
      value = argv[++i]
    }
    if (value === undefined) throw new TowerConfigError(`${flag} needs a value`)
    values.set(flag, value)
  }
  return { values, help: false }
}

/** A misspelt TOWER_SSE_ variable would otherwise be ignored without a word. */
function checkEnvNames (env: NodeJS.ProcessEnv): void {
  const known = new Set(OPTION_SPECS.map((spec) => spec.env))
  for (const name of Object.keys(env)) {
    if (name.startsWith(ENV_PREFIX) && !known.has(name)) {
      throw new TowerConfigError(`unknown environment variable ${name} (see --help)`)
    }
  }
}

/** A value as given, with the flag or variable it came from. */
type Given = { source: string, text: string } | undefined

/**
 * Builds Tower's configuration: flags override environment variables, which override the
 * defaults (the plugin's DEFAULTS, 127.0.0.1 and 4100). Plugin values are checked by the
 * plugin's normalizeOptions here, so a bad one stops start-up before anything listens.
 */
export function parseConfig (argv: readonly string[], env: NodeJS.ProcessEnv): TowerConfig {
  const { values: flags, help } = readFlags(argv)
  checkEnvNames(env)
  // The flag or variable the value came from: where to point the user when it is refused.
  const pickText = (flag: string, envName: string): Given => {
    const fromFlag = flags.get(flag)
    if (fromFlag !== undefined) return { source: flag, text: fromFlag }
    const fromEnv = env[envName]
    return fromEnv === undefined ? undefined : { source: envName, text: fromEnv }
  }

  const hostText = pickText('--host', 'HOST')
  const portText = pickText('--port', 'PORT')
  const host = hostText === undefined ? DEFAULT_HOST : parseListenHost(hostText.source, hostText.text)
  const port = portText === undefined ? DEFAULT_PORT : parsePort(portText.source, portText.text)
  const hostsText = pickText('--allowed-hosts', 'TOWER_ALLOWED_HOSTS')
  const tokenText = pickText('--token', 'TOWER_TOKEN')
  const tokenFileText = pickText('--token-file', 'TOWER_TOKEN_FILE')
  const warnings: string[] = []
  if (tokenText?.source === '--token') warnings.push(`--token ${VISIBLE_FLAG}: use --token-file or TOWER_TOKEN`)
  const timeoutText = pickText('--request-timeout-ms', 'TOWER_REQUEST_TIMEOUT_MS')
  const trustText = pickText('--trust-proxy', 'TOWER_TRUST_PROXY')
  const logFormatText = pickText('--log-format', 'TOWER_LOG_FORMAT')
  // The name Tower was started on is answered too (an address that is no allowlist entry, like a
  // bare IPv6 wildcard, adds nothing).
  const allowedHosts = [
    ...(hostsText === undefined ? [] : parseAllowedHosts(hostsText.source, hostsText.text)),
    ...[parseAllowedHost(host)].filter((h): h is string => h !== null && h !== '*')
  ]

  const sse: Record<string, unknown> = {}
  const sources = new Map<string, string>()
  const redisText = pickText('--redis', 'TOWER_REDIS_URL')
  if (redisText !== undefined) {
    sse.redis = redisText.text
    sources.set('redis', redisText.source)
  }
  const workersText = pickText('--workers', 'TOWER_WORKERS')
  const workers = workersText === undefined ? 1 : parseInteger(workersText.source, workersText.text)
  if (workersText !== undefined && (workers < 1 || workers > MAX_WORKERS)) {
    throw new TowerConfigError(`${workersText.source} must be between 1 and ${MAX_WORKERS}, got ${workers}`)
  }
  if (workers > 1 && redisText === undefined) {
    throw new TowerConfigError(`${workersText?.source ?? 'workers'} ${workers} needs --redis (or TOWER_REDIS_URL): without a shared bus each worker would see only its own streams`)
  }
  const groups: Partial<Record<Group, Record<string, unknown>>> = {}
  for (const spec of OPTION_SPECS) {
    const given = pickText(spec.flag, spec.env)
    if (given === undefined) continue
    const value = spec.integer ? parseInteger(given.source, given.text) : given.text
    if (spec.group === undefined) sse[spec.key] = value
    else (groups[spec.group] ??= {})[spec.key] = value
    sources.set(spec.name, given.source)
  }
  if (groups.redis !== undefined) {
    if (redisText === undefined) {
      throw new TowerConfigError(`${[...sources.entries()].find(([name]) => name.startsWith('redis.'))?.[1] ?? 'redis'} needs --redis (or TOWER_REDIS_URL)`)
    }
    sse.redis = { url: redisText.text, ...groups.redis }
    sources.set('redis.url', redisText.source)
  }
  for (const group of ['storm', 'connectRate', 'history'] as const) if (groups[group] !== undefined) sse[group] = groups[group]
  const options = sse as TowerSseOptions
  const limits = validate(options, sources)
  if (redisText?.source === '--redis' && redactRedisUrl(redisText.text) !== redisText.text) {
    warnings.push(`the password in --redis ${VISIBLE_FLAG}: use TOWER_REDIS_URL`)
  }
  // Only a config object can say false; Tower's dashboard needs its stream route.
  if (limits.path === false) throw new TowerConfigError('path: false: Tower serves its event stream at a path of its own')
  const shadowed = shadowedFileRoute(limits.path)
  const problem = routeProblem(limits.path) ?? (shadowed === null ? null : `would hide a file Tower serves at ${shadowed}; the event stream needs a path of its own`)
  if (problem !== null) throw new TowerConfigError(`${sources.get('path') ?? 'path'}: ${JSON.stringify(limits.path)} ${problem}`)
  return {
    host,
    port,
    sse: options,
    limits,
    allowedHosts,
    token: pickToken(tokenText, tokenFileText),
    warnings,
    requestTimeoutMs: timeoutText === undefined ? TOWER_DEFAULTS.requestTimeoutMs : parseTimeout(timeoutText.source, timeoutText.text),
    help,
    workers,
    trustProxy: trustText === undefined ? undefined : parseTrustProxy(trustText.source, trustText.text),
    logFormat: logFormatText === undefined ? undefined : parseLogFormat(logFormatText.source, logFormatText.text)
  }
}

/** --token or --token-file: a flag wins over a variable, as everywhere; both at one level is a mistake. */
function pickToken (token: Given, tokenFile: Given): string | undefined {
  if (token !== undefined && tokenFile !== undefined) {
    const tokenIsFlag = token.source.startsWith('--')
    if (tokenIsFlag === tokenFile.source.startsWith('--')) throw new TowerConfigError(`${token.source} and ${tokenFile.source}: give the token one way`)
    return tokenIsFlag ? parseToken(token.source, token.text) : readTokenFile(tokenFile.source, tokenFile.text)
  }
  if (token !== undefined) return parseToken(token.source, token.text)
  return tokenFile === undefined ? undefined : readTokenFile(tokenFile.source, tokenFile.text)
}

function validate (sse: TowerSseOptions, sources: Map<string, string>): NormalizedOptions {
  try {
    return normalizeOptions(sse)
  } catch (err) {
    if (!(err instanceof TowerSseOptionError)) throw err
    const reason = err.message.replace(/^tower-sse: /, '')
    // The plugin names the option that was set (a combination rule with a default included).
    const source = sources.get(err.option)
    throw new TowerConfigError(source === undefined ? reason : `${source}: ${reason}`)
  }
}

/** `--help`: every flag with its environment variable and default, derived like the parser. */
export function usage (): string {
  const rows: Array<[string, string, string]> = [
    ['--host <host>', 'HOST', DEFAULT_HOST],
    ['--port <integer>', 'PORT', String(DEFAULT_PORT)],
    ['--workers <integer>', 'TOWER_WORKERS', '1'],
    ['--redis <url>', 'TOWER_REDIS_URL', 'none (memory bus)'],
    ...TOWER_SETTINGS.map((setting): [string, string, string] => [`${setting.flag} ${setting.value}`, setting.env, setting.default]),
    ...OPTION_SPECS.map((spec): [string, string, string] => [`${spec.flag} <${spec.integer ? 'integer' : 'string'}>`, spec.env, spec.shown])
  ]
  const flagWidth = Math.max(...rows.map((r) => r[0].length))
  const envWidth = Math.max(...rows.map((r) => r[1].length))
  const lines = rows.map(([flag, envName, def]) => `  ${flag.padEnd(flagWidth)}  ${envName.padEnd(envWidth)}  ${def}`)
  return [
    'Usage: tower [options]   (in a clone of the repository: npm start -- [options])',
    '',
    'Tower: tower-sse on Fastify with POST /api/notify, GET /api/events/stats and a dashboard at /.',
    '',
    `  ${'flag'.padEnd(flagWidth)}  ${'environment'.padEnd(envWidth)}  default`,
    ...lines,
    `  ${'--help'.padEnd(flagWidth)}  ${''.padEnd(envWidth)}  print this help`,
    '',
    'Flags override environment variables, which override the defaults.',
    ''
  ].join('\n')
}

/** Whose X-Forwarded-For Tower believes, for the start-up line. */
export function describeTrustProxy (trustProxy: TrustProxy | undefined): string {
  if (trustProxy === undefined) return 'trustProxy off (a client is its socket address)'
  return `trustProxy ${trustProxy.join(' ')} (X-Forwarded-For believed from these)`
}

/** The limits in force, for the start-up line: every plugin option except the route path. */
export function describeLimits (limits: NormalizedOptions): string {
  return OPTION_SPECS
    .filter((spec) => spec.name !== 'path')
    .map((spec) => {
      const group = spec.group === undefined ? limits : limits[spec.group]
      const value = group === false || group === undefined ? 'off' : (group as unknown as Record<string, unknown>)[spec.key]
      return `${spec.name} ${typeof value === 'object' ? 'set' : String(value)}`
    })
    .join(', ')
}
