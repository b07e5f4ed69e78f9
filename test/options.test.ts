import t from 'tap'
import Fastify from 'fastify'
import towerSse, { DEFAULTS } from '../lib'
import { normalizeOptions } from '../lib/options'
import { withTestClocks } from '../lib/testing'
import { startApp } from './fixtures/app'
import { connect } from './fixtures/sse-connection'

t.test('defaults fill every option, by group; the clocks are the real ones', async (t) => {
  const options = normalizeOptions(undefined)
  t.match(options, { ...DEFAULTS, redis: undefined, connectRate: false })
  t.same(options.history, DEFAULTS.history)
  t.same(options.storm, DEFAULTS.storm)
  t.equal(options.clocks.random, Math.random)
  t.equal(options.clocks.now, Date.now)
  t.equal(options.initialEvent, undefined)
})

t.test('twenty options at the top level, each group its own; a test seam is none of them', async (t) => {
  const top = ['path', 'maxClients', 'maxClientsPerKey', 'keyFn', 'retryMs', 'retryAfterSeconds', 'rejectWith', 'storm', 'connectRate',
    'heartbeatMs', 'maxAgeMs', 'maxBufferedBytes', 'drainMs', 'history', 'redis', 'guard', 'metrics', 'logIntervalMs', 'topicsFromRequest', 'initialEvent']
  t.equal(top.length, 20)
  for (const key of top) t.doesNotThrow(() => normalizeOptions({ [key]: undefined }), key)
  t.throws(() => normalizeOptions({ random: Math.random } as never), { option: 'random', message: /moved to withTestClocks\(\) of tower-sse\/testing/ })
  const clocks = normalizeOptions(withTestClocks({ maxClients: 3 }, { random: () => 0.5, monotonicNow: () => 7 })).clocks
  t.same([clocks.random(), clocks.monotonicNow(), clocks.now === Date.now], [0.5, 7, true], 'withTestClocks() replaces only the clocks it is given')
  t.throws(() => normalizeOptions(withTestClocks({}, { random: 4 as never })), { option: 'withTestClocks: random', message: /must be a function/ })
})

const BAD: Array<[string, Record<string, unknown>, RegExp]> = [
  ['path', { path: 'api/events' }, /option "path" must be a URL path as sent on the wire: .*, got "api\/events"/],
  ['path', { path: 42 }, /option "path" .* got 42/],
  ['maxClients', { maxClients: 0 }, /option "maxClients" must be an integer >= 1, got 0/],
  ['maxClients', { maxClients: 2.5 }, /option "maxClients" .* got 2\.5/],
  ['maxClients', { maxClients: '200' }, /option "maxClients" .* got "200"/],
  ['maxClients', { maxClients: Number.NaN }, /option "maxClients" .* got null|NaN/],
  ['retryMs', { retryMs: -1 }, /option "retryMs" must be an integer between 0 and 3600000, got -1/],
  ['retryAfterSeconds', { retryAfterSeconds: 0 }, /option "retryAfterSeconds" must be an integer between 1 and 3600, got 0/],
  ['heartbeatMs', { heartbeatMs: 0 }, /option "heartbeatMs" must be an integer between 1 and 2147483647, got 0/],
  ['heartbeatMs', { heartbeatMs: 2 ** 31 }, /option "heartbeatMs" .* got 2147483648/],
  ['maxAgeMs', { maxAgeMs: -5 }, /option "maxAgeMs" .* got -5/],
  // With its ±20%, a lifetime must still fit a timer.
  ['maxAgeMs', { maxAgeMs: 2 ** 31 - 1 }, /option "maxAgeMs" must be an integer between 0 and 1789569705, got 2147483647/],
  ['logIntervalMs', { logIntervalMs: 0 }, /option "logIntervalMs" .* got 0/],
  ['maxBufferedBytes', { maxBufferedBytes: 0 }, /option "maxBufferedBytes" .* got 0/],
  ['initialEvent', { initialEvent: 'hello' }, /option "initialEvent" must be a function .* got "hello"/],
  ['rejectWith', { rejectWith: 503 }, /option "rejectWith" must be either "503" or "retry", got 503/],
  ['storm', { storm: true }, /option "storm" must be an object \{ refusalsPerSecond, tarpitMs, maxRetryAfterSeconds \}, got true/],
  ['storm.tarpitMs', { storm: { tarpitMs: 60_001 } }, /option "storm.tarpitMs" must be an integer between 0 and 60000, got 60001/],
  ['storm.tarpitms', { storm: { tarpitms: 5 } }, /option "storm.tarpitms" must be one of storm's options \(did you mean "tarpitMs"\?\), got 5/],
  // One option set against the default of its pair: the error names the option the user set.
  ['retryAfterSeconds', { retryAfterSeconds: 120 },
    /option "retryAfterSeconds" must be at most storm.maxRetryAfterSeconds \(60, its default: set it too, or storm: false\), got 120/],
  ['storm.maxRetryAfterSeconds', { retryAfterSeconds: 4, storm: { maxRetryAfterSeconds: 3 } }, /option "storm.maxRetryAfterSeconds" must be at least retryAfterSeconds \(4\), got 3/],
  ['connectRate.perSecond', { connectRate: {} }, /option "connectRate.perSecond" must be an integer >= 1 \(connectRate: false turns the guard off\)/],
  ['connectRate.burst', { connectRate: { perSecond: 5, burst: 0 } }, /option "connectRate.burst" must be an integer >= 1, got 0/],
  ['history.events', { history: { events: -1 } }, /option "history.events" must be an integer >= 0, got -1/],
  ['history', { history: 100 }, /option "history" must be an object \{ events, bytes, idempotencyWindowMs \}, got 100/],
  ['redis', { redis: 42 }, /option "redis" must be a redis:\/\/, .* or \{ url \| client, key, .* \}, got 42/],
  ['redis', { redis: { key: 'x' } }, /option "redis" must be an object with exactly one of url .* or client/],
  ['redis.key', { redis: { url: 'redis://127.0.0.1:1', key: 'a key' } }, /option "redis.key" must be 1-100 characters/],
  ['redis.publishTimeoutMs', { redis: { url: 'redis://127.0.0.1:1', publishTimeoutMs: 0 } }, /option "redis.publishTimeoutMs" must be an integer between 1 and 60000, got 0/],
  ['guard.allowedHosts', { guard: { allowedHosts: [] } }, /option "guard.allowedHosts" must be a non-empty array/],
  ['metrics', { metrics: {} }, /option "metrics" must be a prom-client Registry/],
  // A misspelt option is named with the nearest one; a name of an earlier version with where it went.
  ['maxclients', { maxclients: 5 }, /option "maxclients" must be one of tower-sse's options \(did you mean "maxClients"\?\), got 5/],
  ['heartbeatMS', { heartbeatMS: 5 }, /\(did you mean "heartbeatMs"\?\)/],
  ['historyMaxEvents', { historyMaxEvents: 5 }, /option "historyMaxEvents" must be one of tower-sse's options \(moved to history: \{ events \}\), got 5/],
  ['redisKey', { redisKey: 'k' }, /\(moved to redis: \{ url, key \}\)/],
  ['retryJitterMs', { retryJitterMs: 0 }, /\(gone: every delay is jittered ±20%\)/],
  ['somethingElse', { somethingElse: 1 }, /option "somethingElse" must be one of tower-sse's options, got 1/],
  // Two edits (a transposition) on a short name is still a typo.
  ['drianMs', { drianMs: 5 }, /\(did you mean "drainMs"\?\)/],
  ['storm', { storm: [] }, /option "storm" must be an object \{ refusalsPerSecond, tarpitMs, maxRetryAfterSeconds \}, got \[\]/],
  ['metrics', { metrics: { metrics: () => '' } }, /option "metrics" must be a prom-client Registry/],
  ['redis', { redis: { url: 'redis://127.0.0.1:1', client: { status: 'ready', duplicate: () => {}, evalsha: () => {} } } }, /option "redis" must be an object with exactly one of url .* or client/]
]

for (const [name, input, message] of BAD) {
  t.test(`bad ${name} is refused at register time: ${JSON.stringify(input) ?? ''}`, async (t) => {
    t.throws(() => normalizeOptions(input), { code: 'TOWER_SSE_OPTION', name: 'TowerSseOptionError', option: name, message })
    const app = Fastify()
    await t.rejects(async () => { await app.register(towerSse, input) }, { code: 'TOWER_SSE_OPTION', option: name, message },
      'the same error surfaces from app.register()')
  })
}

t.test('every range includes its ends: the least and the greatest value of each option are taken as given', async (t) => {
  type Normalized = ReturnType<typeof normalizeOptions>
  const GOOD: Array<[Record<string, unknown>, (options: Normalized) => unknown, unknown]> = [
    [{ maxClientsPerKey: 0 }, (o) => o.maxClientsPerKey, 0],
    [{ retryMs: 0 }, (o) => o.retryMs, 0],
    [{ retryMs: 3_600_000 }, (o) => o.retryMs, 3_600_000],
    [{ heartbeatMs: 2 ** 31 - 1 }, (o) => o.heartbeatMs, 2 ** 31 - 1],
    [{ maxAgeMs: 1_789_569_705 }, (o) => o.maxAgeMs, 1_789_569_705],
    [{ history: { events: 0, bytes: 0 } }, (o) => [o.history.events, o.history.bytes], [0, 0]],
    [{ storm: { tarpitMs: 0, refusalsPerSecond: 0 } }, (o) => o.storm, { ...DEFAULTS.storm, tarpitMs: 0, refusalsPerSecond: 0 }],
    [{ storm: { tarpitMs: 60_000 } }, (o) => o.storm !== false && o.storm.tarpitMs, 60_000],
    // A storm bound equal to the base window: refusals never widen, which is allowed.
    [{ retryAfterSeconds: 60 }, (o) => [o.retryAfterSeconds, o.storm !== false && o.storm.maxRetryAfterSeconds], [60, 60]],
    [{ retryAfterSeconds: 3600, storm: { maxRetryAfterSeconds: 3600 } }, (o) => o.retryAfterSeconds, 3600],
    [{ connectRate: { perSecond: 7 } }, (o) => o.connectRate, { perSecond: 7, burst: 7 }],
    [{ redis: { url: 'redis://127.0.0.1:1', deafCloseMs: 0 } }, (o) => o.redis?.deafCloseMs, 0]
  ]
  for (const [input, pick, expected] of GOOD) t.same(pick(normalizeOptions(input)), expected, JSON.stringify(input))
})

t.test('the error describes values JSON cannot', async (t) => {
  t.throws(() => normalizeOptions({ maxClients: 10n as unknown as number }), { message: /got 10n/ })
  const circular: Record<string, unknown> = {}
  circular.self = circular
  t.throws(() => normalizeOptions({ path: circular as unknown as string }), { message: /got \[object Object\]/ })
  t.throws(() => normalizeOptions({ path: (() => '/') as unknown as string }), { message: /got a function/ })
  t.throws(() => normalizeOptions({ path: Symbol('x') as unknown as string }), { message: /got Symbol\(x\)/ })
})

t.test('Fastify register options (prefix, logLevel) are not mistaken for unknown options', async (t) => {
  const app = Fastify()
  await app.register(towerSse, { logLevel: 'warn', maxClients: 3 } as never)
  t.equal(app.sse.capacity, 3)
  await app.close()
})

t.test('a path no request could reach is refused, naming the option', async (t) => {
  for (const path of ['/a b', '/x?y', '/a#b', '/a%20b', '/é', '/events*', '/a/../b', '/a/./b', '/..', '/a\tb', '', '/a\\b']) {
    t.throws(() => normalizeOptions({ path }), { name: 'TowerSseOptionError', option: 'path', message: /^tower-sse: option "path" must be a URL path/ }, JSON.stringify(path))
  }
})

t.test('unusual paths that requests do reach are accepted, and reached', async (t) => {
  for (const [path, url] of [['/a//b', '/a//b'], ["/x;v=1,(a)~!$&'+@", "/x;v=1,(a)~!$&'+@"], ['/:channel', '/news'], ['/sse/', '/sse/']]) {
    const { app, port } = await startApp({ path })
    const conn = await connect(port, url)
    t.equal(conn.status, 200, `${path} reached by ${url}`)
    conn.destroy()
    await app.close()
  }
})
