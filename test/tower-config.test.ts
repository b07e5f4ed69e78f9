import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import fc from 'fast-check'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import { DEFAULTS } from '../lib'
import { normalizeOptions } from '../lib/options'
import { DEFAULT_HOST, DEFAULT_PORT, describeLimits, describeTrustProxy, parseConfig, TowerConfigError, usage } from '../lib/tower/config'
import { chooseLogFormat } from '../lib/tower/logging'

const kebab = (key: string): string => `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`).replace('.', '-')}`
const envName = (key: string): string => `TOWER_SSE_${key.replace(/[A-Z]/g, (c) => `_${c}`).replace('.', '_').toUpperCase()}`

/**
 * Every plugin option Tower sets one value at a time, a group's keys as `group.key`, with its default
 * (redis's need --redis). connectRate is off by default (false): its keys are SETTABLE_CONNECT_RATE.
 */
const OPTIONS: Array<{ name: string, value: unknown, group?: string, key: string }> = Object.entries(DEFAULTS).flatMap(([name, value]) => {
  if (name === 'connectRate') return []
  return typeof value === 'object' && value !== null
    ? Object.entries(value).map(([key, sub]) => ({ name: `${name}.${key}`, value: sub as unknown, group: name, key }))
    : [{ name, value: value as unknown, key: name }]
})
/** connectRate's keys, with values to set (integers, as a rate's are). */
const SETTABLE_CONNECT_RATE: typeof OPTIONS = [
  { name: 'connectRate.perSecond', value: 20, group: 'connectRate', key: 'perSecond' },
  { name: 'connectRate.burst', value: 40, group: 'connectRate', key: 'burst' }
]
/** What an option needs given beside it: --redis for a redis setting, a rate for a burst. */
const needs = (option: typeof OPTIONS[number]): string[] =>
  option.group === 'redis' ? ['--redis', 'redis://127.0.0.1:6379'] : option.name === 'connectRate.burst' ? ['--connect-rate-per-second', '20'] : []
/** What the option reads in the options Tower hands the plugin. */
const given = (sse: Record<string, unknown>, option: typeof OPTIONS[number]): unknown =>
  option.group === undefined ? sse[option.key] : (sse[option.group] as Record<string, unknown> | undefined)?.[option.key]

t.test('with nothing given: 127.0.0.1:4100 and exactly the plugin DEFAULTS', async (t) => {
  const config = parseConfig([], {})
  t.equal(config.host, DEFAULT_HOST)
  t.equal(config.port, DEFAULT_PORT)
  t.same([DEFAULT_HOST, DEFAULT_PORT], ['127.0.0.1', 4100])
  t.same(config.sse, {}, 'no plugin option is set, so the plugin applies its own defaults')
  t.same(config.limits, normalizeOptions({}))
  t.same(config.allowedHosts, ['127.0.0.1'], 'the host it listens on, besides the defaults')
  t.equal(config.token, undefined)
  t.equal(config.requestTimeoutMs, 10_000)
  t.equal(config.help, false)
})

t.test('every option in DEFAULTS is settable by flag and by environment, a group\'s as --group-key, typed like its default', async (t) => {
  const settable = [...OPTIONS, ...SETTABLE_CONNECT_RATE]
  t.ok(settable.length > 20, `${settable.length} options`)
  for (const option of settable) {
    const text = String(option.value)
    const fromFlag = parseConfig([...needs(option), kebab(option.name), text], {})
    const fromEnv = parseConfig(needs(option), { [envName(option.name)]: text })
    t.equal(given(fromFlag.sse as Record<string, unknown>, option), option.value, `${kebab(option.name)} ${text}`)
    t.equal(given(fromEnv.sse as Record<string, unknown>, option), option.value, `${envName(option.name)}=${text}`)
  }
})

t.test('grouped flags build the plugin\'s groups; a redis setting needs --redis', async (t) => {
  const config = parseConfig(['--storm-tarpit-ms', '0', '--connect-rate-per-second', '20', '--history-events', '50', '--redis', 'redis://127.0.0.1:6379', '--redis-key', 'tw'], {})
  t.same(config.sse, { storm: { tarpitMs: 0 }, connectRate: { perSecond: 20 }, history: { events: 50 }, redis: { url: 'redis://127.0.0.1:6379', key: 'tw' } })
  t.same([config.limits.storm, config.limits.connectRate, config.limits.history.events, config.limits.redis?.key],
    [{ ...DEFAULTS.storm, tarpitMs: 0 }, { perSecond: 20, burst: 20 }, 50, 'tw'])
  t.throws(() => parseConfig(['--redis-key', 'tw'], {}), { message: '--redis-key needs --redis (or TOWER_REDIS_URL)' })
  t.throws(() => parseConfig(['--storm-tarpit-ms', '70000'], {}), { message: '--storm-tarpit-ms: option "storm.tarpitMs" must be an integer between 0 and 60000, got 70000' })
  t.throws(() => parseConfig(['--tarpit-ms', '0'], {}), { message: 'unknown flag --tarpit-ms (see --help)' })
})

t.test('values from flags, --flag=value and environment reach the plugin options', async (t) => {
  const config = parseConfig(
    ['--max-clients', '50', '--max-age-ms=120000', '--path', '/sse', '--host', '::1', '--port=0'],
    { TOWER_SSE_RETRY_AFTER_SECONDS: '9', TOWER_SSE_REJECT_WITH: 'retry', UNRELATED: 'x' }
  )
  t.same(config.sse, { path: '/sse', maxClients: 50, retryAfterSeconds: 9, maxAgeMs: 120_000, rejectWith: 'retry' })
  t.equal(config.host, '::1')
  t.equal(config.port, 0)
  t.equal(config.limits.maxClients, 50)
  t.equal(config.limits.heartbeatMs, DEFAULTS.heartbeatMs, 'what is not given keeps its default')
})

t.test('precedence: flags over environment over defaults', async (t) => {
  const env = { TOWER_SSE_MAX_CLIENTS: '50', TOWER_SSE_HEARTBEAT_MS: '15000', HOST: '0.0.0.0', PORT: '4200' }
  const config = parseConfig(['--max-clients', '7', '--port', '4300'], env)
  t.equal(config.sse.maxClients, 7, 'flag beats environment')
  t.equal(config.sse.heartbeatMs, 15_000, 'environment beats default')
  t.equal(config.limits.retryMs, DEFAULTS.retryMs, 'default where neither is given')
  t.equal(config.port, 4300)
  t.equal(config.host, '0.0.0.0', 'HOST from the environment')
})

const refusals: Array<[string, string[], NodeJS.ProcessEnv, string]> = [
  ['not an integer (flag)', ['--max-clients', '5x'], {}, '--max-clients must be an integer, got "5x"'],
  ['not an integer (env)', [], { TOWER_SSE_MAX_AGE_MS: '1e5' }, 'TOWER_SSE_MAX_AGE_MS must be an integer, got "1e5"'],
  ['a fraction', ['--retry-ms', '1.5'], {}, '--retry-ms must be an integer, got "1.5"'],
  ['empty from env', [], { TOWER_SSE_HEARTBEAT_MS: '' }, 'TOWER_SSE_HEARTBEAT_MS must be an integer, got ""'],
  ['beyond a safe integer', ['--max-clients', '9007199254740993'], {}, '--max-clients must be an integer, got "9007199254740993"'],
  ['refused by the plugin (flag)', ['--max-clients', '0'], {}, '--max-clients: option "maxClients" must be an integer >= 1, got 0'],
  ['refused by the plugin (env)', [], { TOWER_SSE_PATH: 'events' }, 'TOWER_SSE_PATH: option "path" must be a URL path'],
  ['a path no request reaches', ['--path', '/x?y'], {}, '--path: option "path" must be a URL path'],
  ['a path with a space', [], { TOWER_SSE_PATH: '/a b' }, 'TOWER_SSE_PATH: option "path" must be a URL path'],
  ['the stream on the dashboard\'s files', [], { TOWER_SSE_PATH: '/:name' },
    'TOWER_SSE_PATH: "/:name" is the dashboard\'s files (/:name); the event stream needs a path of its own'],
  ['the same route shape under another parameter name', ['--path', '/vendor/:module'], {}, '--path: "/vendor/:module" is the dashboard\'s vendor modules'],
  ['the stream on the notify route', ['--path', '/api/notify'], {}, '--path: "/api/notify" is the notify route'],
  ['a pattern Fastify refuses', ['--path', '/:id('], {}, '--path: "/:id(" is not a route Fastify accepts (Invalid regexp expression in "/:id(")'],
  ['a bad allowed host', ['--allowed-hosts', 'tower.example,evil com'], {}, '--allowed-hosts: "evil com" is not a host name, an IP address, *.domain or *'],
  ['an allowed host with a port', [], { TOWER_ALLOWED_HOSTS: 'localhost:4100' }, 'TOWER_ALLOWED_HOSTS: "localhost:4100" is not a host name'],
  ['a token with a space', ['--token', 'two words'], {}, '--token must be printable ASCII without spaces'],
  ['an empty token', [], { TOWER_TOKEN: '' }, 'TOWER_TOKEN must be printable ASCII without spaces'],
  ['a request timeout of 0', ['--request-timeout-ms', '0'], {}, '--request-timeout-ms must be an integer between 1 and 2147483647, got 0'],
  ['a request timeout that is no integer', [], { TOWER_REQUEST_TIMEOUT_MS: '10s' }, 'TOWER_REQUEST_TIMEOUT_MS must be an integer, got "10s"'],
  ['an unknown log format', ['--log-format', 'text'], {}, '--log-format must be pretty or json, got "text"'],
  ['a log format in the wrong case', [], { TOWER_LOG_FORMAT: 'JSON' }, 'TOWER_LOG_FORMAT must be pretty or json, got "JSON"'],
  ['a string option refused by the plugin', ['--reject-with', 'evict'], {}, '--reject-with: option "rejectWith"'],
  ['a default made invalid by another value', ['--retry-after-seconds', '90'], {},
    '--retry-after-seconds: option "retryAfterSeconds" must be at most storm.maxRetryAfterSeconds (60, its default: set it too, or storm: false), got 90'],
  ['the stream on the stats route', ['--path', '/api/events/stats'], {},
    '--path: "/api/events/stats" is the stats route; the event stream needs a path of its own'],
  ['the stream on the metrics route', ['--path', '/metrics'], {},
    '--path: "/metrics" is the metrics route; the event stream needs a path of its own'],
  ['the stream on the dashboard', [], { TOWER_SSE_PATH: '/' }, 'TOWER_SSE_PATH: "/" is the dashboard page; the event stream needs a path of its own'],
  ['unknown flag', ['--max-client', '5'], {}, 'unknown flag --max-client (see --help)'],
  ['unknown environment variable', [], { TOWER_SSE_MAXCLIENTS: '5' }, 'unknown environment variable TOWER_SSE_MAXCLIENTS (see --help)'],
  ['flag without a value (last)', ['--max-clients'], {}, '--max-clients needs a value'],
  ['flag without a value (next is a flag)', ['--port', '--host', 'x'], {}, '--port needs a value'],
  ['positional argument', ['50'], {}, 'unexpected argument "50" (see --help)'],
  ['port out of range', ['--port', '65536'], {}, '--port must be a port between 0 and 65535, got 65536'],
  ['port from env not a number', [], { PORT: 'http' }, 'PORT must be an integer, got "http"'],
  ['blank host', ['--host', ' '], {}, '--host must be a host name or address, got " "'],
  ['the stream over a dashboard file', ['--path', '/dashboard.js'], {}, '--path: "/dashboard.js" would hide a file Tower serves at /:name; the event stream needs a path of its own'],
  ['the stream over the dashboard page file', [], { TOWER_SSE_PATH: '/index.html' }, 'TOWER_SSE_PATH: "/index.html" would hide a file Tower serves at /:name'],
  ['the stream over a vendor module', ['--path', '/vendor/uplot.js'], {}, '--path: "/vendor/uplot.js" would hide a file Tower serves at /vendor/:name'],
  ['the stream over a client module', ['--path', '/vendor/tower-sse-client/index.js'], {}, '--path: "/vendor/tower-sse-client/index.js" would hide a file Tower serves at /vendor/tower-sse-client/:name'],
  ['trusting every proxy', ['--trust-proxy', 'true'], {}, '--trust-proxy: trusting every address lets any client choose its own address with X-Forwarded-For'],
  ['trusting every proxy (*)', [], { TOWER_TRUST_PROXY: '*' }, 'TOWER_TRUST_PROXY: trusting every address'],
  ['trusting every IPv4 address', ['--trust-proxy', '127.0.0.1,0.0.0.0/0'], {}, '--trust-proxy: trusting every address'],
  ['trusting every IPv6 address', ['--trust-proxy', '::/0'], {}, '--trust-proxy: trusting every address'],
  ['a hop count', ['--trust-proxy', '1'], {}, '--trust-proxy: a hop count cannot tell a proxy from a client'],
  ['a proxy that is no address', ['--trust-proxy', '127.0.0.1, proxy.local'], {}, '--trust-proxy: "proxy.local" is not an IP address, a CIDR range (address/bits) or one of loopback, linklocal, uniquelocal'],
  ['a CIDR prefix too long', ['--trust-proxy', '10.0.0.0/33'], {}, '--trust-proxy: "10.0.0.0/33" is not an IP address'],
  ['an empty proxy list', [], { TOWER_TRUST_PROXY: ' , ' }, 'TOWER_TRUST_PROXY must be the proxy\'s addresses or CIDR ranges, got " , "'],
  ['a host that is not one', ['--host', 'tower example'], {}, '--host must be a host name or address, got "tower example"'],
  ['a wildcard host', [], { HOST: '*' }, 'HOST must be a host name or address, got "*"']
]

t.test('bad input stops start-up with one line naming what was wrong', async (t) => {
  for (const [what, argv, env, message] of refusals) {
    let error: unknown
    try {
      parseConfig(argv, env)
    } catch (err) {
      error = err
    }
    t.type(error, TowerConfigError, what)
    t.match(error, { code: 'TOWER_CONFIG' }, what)
    const text = error instanceof Error ? error.message : ''
    t.ok(text.startsWith(message), `${what}: ${text}`)
    t.notMatch(text, /\n/, `${what}: one line`)
  }
})

t.test('Tower\'s own settings: allowed hosts (plus the host it listens on), token, request timeout', async (t) => {
  const config = parseConfig(['--allowed-hosts', ' tower.example, *.Corp.Test,,::1 ', '--host', 'my-box.local', '--token=s3cr3t-t0ken'],
    { TOWER_REQUEST_TIMEOUT_MS: '2500', TOWER_TOKEN: 'ignored: the flag wins' })
  t.same(config.allowedHosts, ['tower.example', '*.corp.test', '[::1]', 'my-box.local'])
  t.equal(config.token, 's3cr3t-t0ken')
  t.equal(config.requestTimeoutMs, 2500)
  t.same(parseConfig(['--host', '::'], {}).allowedHosts, ['[::]'], 'an IPv6 listen address is bracketed')
  t.match(usage(), /--allowed-hosts <list>\s+TOWER_ALLOWED_HOSTS\s+\(none\)/)
  t.match(usage(), /--token <token>\s+TOWER_TOKEN\s+\(none\)/)
  t.match(usage(), /--request-timeout-ms <integer>\s+TOWER_REQUEST_TIMEOUT_MS\s+10000/)
})

t.test('--trust-proxy: the proxies\' addresses, CIDR ranges and range names; none by default', async (t) => {
  t.same(parseConfig(['--trust-proxy', ' 127.0.0.1, 10.0.0.0/8,,::1,fd00::/8,loopback '], {}).trustProxy, ['127.0.0.1', '10.0.0.0/8', '::1', 'fd00::/8', 'loopback'])
  t.same(parseConfig([], { TOWER_TRUST_PROXY: '192.0.2.10' }).trustProxy, ['192.0.2.10'])
  t.same(parseConfig(['--trust-proxy', '192.0.2.10/32,2001:db8::1/128'], {}).trustProxy, ['192.0.2.10/32', '2001:db8::1/128'], 'the longest prefix of each family is one address')
  t.equal(parseConfig([], {}).trustProxy, undefined)
  t.equal(describeTrustProxy(undefined), 'trustProxy off (a client is its socket address)')
  t.equal(describeTrustProxy(['127.0.0.1', '10.0.0.0/8']), 'trustProxy 127.0.0.1 10.0.0.0/8 (X-Forwarded-For believed from these)')
  t.match(usage(), /--trust-proxy <list>\s+TOWER_TRUST_PROXY\s+\(none\)/)
})

/** A file holding `content` with permission `mode`, in a directory removed at the test's end. */
function secretFile (t: Test, content: string, mode = 0o600): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'tower-token-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'token')
  writeFileSync(file, content)
  chmodSync(file, mode)
  return file
}

t.test('--token-file / TOWER_TOKEN_FILE: the token is the file less one trailing newline', async (t) => {
  t.equal(parseConfig(['--token-file', secretFile(t, 's3cr3t-t0ken\n')], {}).token, 's3cr3t-t0ken')
  t.equal(parseConfig([], { TOWER_TOKEN_FILE: secretFile(t, 's3cr3t-t0ken\r\n') }).token, 's3cr3t-t0ken', 'a CRLF line too')
  t.equal(parseConfig([`--token-file=${secretFile(t, 'no-newline')}`], {}).token, 'no-newline')
  t.equal(parseConfig(['--token-file', secretFile(t, 'from-file')], { TOWER_TOKEN: 'from-env' }).token, 'from-file', 'a flag wins over a variable')
  t.equal(parseConfig(['--token', 'from-flag'], { TOWER_TOKEN_FILE: secretFile(t, 'from-file') }).token, 'from-flag', 'either way')
  t.same(parseConfig(['--token-file', secretFile(t, 'x')], {}).warnings, [], 'no warning: the token is not in the command line')
  t.match(usage(), /--token-file <path>\s+TOWER_TOKEN_FILE\s+\(none\)/)

  const refused: Array<[string, string[], Record<string, string>, string]> = [
    ['an empty file', ['--token-file', secretFile(t, '')], {}, 'the file is empty'],
    ['a file of one newline', [], { TOWER_TOKEN_FILE: secretFile(t, '\n') }, 'the file is empty'],
    ['two lines', ['--token-file', secretFile(t, 'one\ntwo\n')], {}, 'must be printable ASCII without spaces'],
    ['a trailing blank line', ['--token-file', secretFile(t, 'one\n\n')], {}, 'must be printable ASCII without spaces'],
    ['readable by others', ['--token-file', secretFile(t, 'x', 0o644)], {}, 'other users may read or change it (mode 644); make it its owner\'s alone: chmod 600 '],
    ['readable by the group', ['--token-file', secretFile(t, 'x', 0o640)], {}, 'other users may read or change it (mode 640)'],
    ['writable by the group', ['--token-file', secretFile(t, 'x', 0o620)], {}, 'other users may read or change it (mode 620)'],
    ['a missing file', ['--token-file', '/nonexistent/token'], {}, 'cannot read it: no such file'],
    ['a directory', ['--token-file', path.dirname(secretFile(t, 'x', 0o600))], {}, 'cannot read it: it is a directory'],
    ['more than a token', ['--token-file', secretFile(t, 'x'.repeat(5000))], {}, 'more than 4096 bytes, not a token'],
    ['both flags', ['--token', 'a', '--token-file', secretFile(t, 'b')], {}, '--token and --token-file: give the token one way'],
    ['both variables', [], { TOWER_TOKEN: 'a', TOWER_TOKEN_FILE: secretFile(t, 'b') }, 'TOWER_TOKEN and TOWER_TOKEN_FILE: give the token one way']
  ]
  for (const [what, argv, env, message] of refused) {
    const error = (() => { try { parseConfig(argv, env) } catch (err) { return err } })()
    t.type(error, TowerConfigError, what)
    t.match((error as Error).message, message, what)
    t.notMatch((error as Error).message, /\n/, `${what}: one line`)
  }
})

t.test('a secret given as a flag is warned about: every local user reads the command line', async (t) => {
  t.same(parseConfig(['--token', 'abc'], {}).warnings, ['--token is in the command line, which every local user can read (ps, /proc/<pid>/cmdline): use --token-file or TOWER_TOKEN'])
  t.same(parseConfig(['--redis', 'redis://:pw@127.0.0.1:6379'], {}).warnings, ['the password in --redis is in the command line, which every local user can read (ps, /proc/<pid>/cmdline): use TOWER_REDIS_URL'])
  t.same(parseConfig(['--redis', 'redis+sentinel://h:1/m?sentinelPassword=pw'], {}).warnings.length, 1, 'a Sentinel password too')
  t.same(parseConfig(['--redis', 'redis://127.0.0.1:6379'], {}).warnings, [], 'no password, no warning')
  t.same(parseConfig([], { TOWER_TOKEN: 'abc', TOWER_REDIS_URL: 'redis://:pw@127.0.0.1:6379' }).warnings, [], 'the environment is its owner\'s: no warning')
})

/** Whether Fastify given `trustProxy` believes the X-Forwarded-For of a request from an address. */
function fastifyTrusts (t: Test, trustProxy: readonly string[]): (remoteAddress: string) => Promise<boolean> {
  const app = Fastify({ trustProxy: [...trustProxy] })
  app.get('/', async (request) => request.ip)
  t.teardown(() => app.close())
  return async (remoteAddress) => (await app.inject({ url: '/', remoteAddress, headers: { 'x-forwarded-for': '203.0.113.9' } })).body === '203.0.113.9'
}

/** The CIDR ranges (aligned blocks, largest first) that cover [from, to) of the IPv6 space. */
function ipv6Blocks (from: bigint, to: bigint): string[] {
  const blocks: string[] = []
  for (let start = from; start < to;) {
    let bits = 0n
    while (bits < 128n && start % (1n << (bits + 1n)) === 0n && start + (1n << (bits + 1n)) <= to) bits++
    const words = Array.from({ length: 8 }, (_, i) => ((start >> BigInt(112 - 16 * i)) & 0xffffn).toString(16))
    blocks.push(`${words.join(':')}/${128n - bits}`)
    start += 1n << bits
  }
  return blocks
}

t.test('--trust-proxy: ranges that together cover a family are refused however they are written', async (t) => {
  // All of IPv6 but the IPv4-mapped block (::ffff:0:0/96): proxy-addr then believes every native IPv6 client.
  const mapped = 0xffffn << 32n
  const allButMapped = [...ipv6Blocks(0n, mapped), ...ipv6Blocks(mapped + (1n << 32n), 1n << 128n)].join(',')

  // [ranges, the families the refusal names, those Fastify's own proxy-addr believes anyone of]
  const covering: Array<[string, string, string[]]> = [
    ['0.0.0.0/1,128.0.0.0/1', 'IPv4', ['IPv4']],
    ['0.0.0.0/2, 64.0.0.0/2, 128.0.0.0/1, 10.0.0.0/8', 'IPv4', ['IPv4']],
    ['::ffff:0.0.0.0/96', 'IPv4', ['IPv4']],
    ['::ffff:0:0/97,::ffff:128.0.0.0/97', 'IPv4', ['IPv4']],
    ['0.0.0.0/1,::ffff:128.0.0.0/97', 'IPv4', ['IPv4']],
    // Express's proxy-addr (and Fastify's before its mapped-address fix) believes every IPv4 client through it.
    ['::/1', 'IPv4', []],
    ['::/1,8000::/1', 'IPv4 and IPv6', ['IPv6']],
    ['0:0:0:0:0:0:0:0/1,8000::1/1,loopback', 'IPv4 and IPv6', ['IPv6']],
    ['0.0.0.0/0,8000::/1,::/2,4000::/2', 'IPv4 and IPv6', ['IPv6']],
    [allButMapped, 'IPv6', ['IPv6']]
  ]
  const octet = fc.integer({ min: 0, max: 255 })
  const addresses = {
    IPv4: fc.tuple(octet, octet, octet, octet).map((o) => o.join('.')),
    // Native IPv6 as a socket gives it: proxy-addr reads a mapped address as its IPv4 client, and an
    // embedded dotted quad (::1.2.3.4, deprecated) as no address at all.
    IPv6: fc.ipV6().filter((address) => !address.includes('.') && !/^::ffff:[\da-f]{1,4}:[\da-f]{1,4}$/i.test(address))
  }
  for (const [ranges, families, believed] of covering) {
    t.throws(() => parseConfig(['--trust-proxy', ranges], {}), {
      message: `--trust-proxy: trusting every address lets any client choose its own address with X-Forwarded-For (these ranges cover all of ${families}); name the proxy's addresses (e.g. 127.0.0.1 or 10.0.0.0/8)`
    }, ranges.slice(0, 60))
    if (ranges.includes('/0')) continue
    const trusts = fastifyTrusts(t, ranges.split(',').map((entry) => entry.trim()))
    for (const family of believed) await fc.assert(fc.asyncProperty(addresses[family as 'IPv4' | 'IPv6'], trusts), { numRuns: 25 })
  }
  // Just short of a family is accepted: proxy-addr believes all of it but an address the test names.
  const nearly: Array<[string, string[]]> = [
    ['0.0.0.0/1,128.0.0.0/2', ['192.0.0.1']],
    ['::ffff:0.0.0.0/97', ['128.0.0.1']],
    ['8000::/1,::ffff:0:0/97', ['::1', '128.0.0.1']],
    // Every IPv4 address but one, as IPv4-mapped ranges: a gap of one address, at an end and inside.
    [ipv6Blocks(mapped, mapped + (1n << 32n) - 1n).join(','), ['255.255.255.255']],
    [[...ipv6Blocks(mapped, mapped + (1n << 31n)), ...ipv6Blocks(mapped + (1n << 31n) + 1n, mapped + (1n << 32n))].join(','), ['128.0.0.0']]
  ]
  for (const [ranges, outside] of nearly) {
    const entries = ranges.split(',')
    t.same(parseConfig(['--trust-proxy', ranges], {}).trustProxy, entries, `${ranges.slice(0, 40)}… is accepted`)
    const trusts = fastifyTrusts(t, entries)
    for (const address of outside) t.notOk(await trusts(address), `${address} is not trusted by ${ranges.slice(0, 40)}…`)
  }
})

t.test('a stream path beside the dashboard\'s files that hides none of them is accepted', async (t) => {
  for (const path of ['/events', '/vendor/events', '/api/events', '/dashboard']) t.equal(parseConfig(['--path', path], {}).limits.path, path)
})

t.test('log format: forced by --log-format or TOWER_LOG_FORMAT, else pretty only for a person at a terminal', async (t) => {
  t.equal(parseConfig([], {}).logFormat, undefined, 'not forced')
  t.equal(parseConfig(['--log-format', 'pretty'], {}).logFormat, 'pretty')
  t.equal(parseConfig([], { TOWER_LOG_FORMAT: 'json' }).logFormat, 'json')
  t.equal(parseConfig(['--log-format=json'], { TOWER_LOG_FORMAT: 'pretty' }).logFormat, 'json', 'the flag wins')
  t.match(usage(), /--log-format pretty\|json\s+TOWER_LOG_FORMAT\s+pretty on a terminal, else json/)
  // [forced, stdout is a terminal, NODE_ENV, pino-pretty installed] → format
  const cases: Array<[Parameters<typeof chooseLogFormat>, string]> = [
    [[undefined, true, undefined], 'pretty'],
    [[undefined, false, undefined], 'json'],
    [[undefined, true, 'production'], 'json'],
    [[undefined, true, 'development'], 'pretty'],
    [['json', true, undefined], 'json'],
    [['pretty', false, 'production'], 'pretty'],
    [[undefined, true, undefined, false], 'json']
  ]
  for (const [args, format] of cases) t.equal(chooseLogFormat(...args), format, JSON.stringify(args))
})

t.test('negative integers are read as numbers and refused by the plugin, not as flags', async (t) => {
  t.throws(() => parseConfig(['--retry-ms', '-5'], {}), { message: '--retry-ms: option "retryMs" must be an integer between 0 and 3600000, got -5' })
})

t.test('--help wins over everything else and lists every option with its variable and default', async (t) => {
  t.equal(parseConfig(['--max-clients', '5', '--help', '--bogus'], {}).help, true)
  t.equal(parseConfig(['-h'], {}).help, true)
  const text = usage()
  for (const option of OPTIONS) {
    const row = text.split('\n').find((line) => line.trimStart().startsWith(`${kebab(option.name)} `))
    t.ok(row, `a row for ${kebab(option.name)}`)
    t.match(row, envName(option.name))
    t.ok(row?.trimEnd().endsWith(` ${String(option.value)}`), `${kebab(option.name)} shows its default ${String(option.value)}`)
  }
  t.match(text, /--connect-rate-per-second <integer>\s+TOWER_SSE_CONNECT_RATE_PER_SECOND\s+off/)
  t.match(text, /--connect-rate-burst <integer>\s+TOWER_SSE_CONNECT_RATE_BURST\s+perSecond/)
  t.match(text, /^Usage: tower \[options\]/, 'named as the bin a user runs (npx tower)')
  t.match(text, /--host <host>\s+HOST\s+127\.0\.0\.1/)
  t.match(text, /--port <integer>\s+PORT\s+4100/)
})

t.test('the start-up description names every limit in force but the path', async (t) => {
  const limits = parseConfig(['--max-clients', '50'], {}).limits
  const text = describeLimits(limits)
  t.match(text, /^maxClients 50, maxClientsPerKey 0, retryMs 5000, /)
  for (const option of OPTIONS.filter((o) => o.name !== 'path' && o.group !== 'redis')) {
    t.match(text, `${option.name} ${String(given(limits as unknown as Record<string, unknown>, option))}`)
  }
  t.match(text, 'connectRate.perSecond off, connectRate.burst off')
  t.match(text, 'redis.key off', 'no Redis: its settings are off')
  t.notMatch(text, /path/)
})
