import t from 'tap'
import Fastify from 'fastify'
import towerSse, { DEFAULTS } from '../lib'
import { normalizeOptions } from '../lib/internal'
import { startApp } from './fixtures/app'
import { connect } from './fixtures/sse-connection'

t.test('defaults fill every option', async (t) => {
  const options = normalizeOptions(undefined)
  t.match(options, DEFAULTS)
  t.equal(options.random, Math.random)
  t.equal(options.initialEvent, undefined)
})

const BAD: Array<[string, Record<string, unknown>, RegExp]> = [
  ['path', { path: 'api/events' }, /option "path" must be a URL path as sent on the wire: .*, got "api\/events"/],
  ['path', { path: 42 }, /option "path" .* got 42/],
  ['maxClients', { maxClients: 0 }, /option "maxClients" must be an integer >= 1, got 0/],
  ['maxClients', { maxClients: 2.5 }, /option "maxClients" .* got 2\.5/],
  ['maxClients', { maxClients: '200' }, /option "maxClients" .* got "200"/],
  ['maxClients', { maxClients: Number.NaN }, /option "maxClients" .* got null|NaN/],
  ['retryMs', { retryMs: -1 }, /option "retryMs" must be an integer >= 0, got -1/],
  ['retryJitterMs', { retryMs: 1000, retryJitterMs: 2000 }, /option "retryJitterMs" must be at most retryMs \(1000\), got 2000/],
  ['retryAfterSeconds', { retryAfterSeconds: 0 }, /option "retryAfterSeconds" must be an integer >= 1, got 0/],
  ['heartbeatMs', { heartbeatMs: 0 }, /option "heartbeatMs" must be an integer between 1 and 2147483647, got 0/],
  ['heartbeatMs', { heartbeatMs: 2 ** 31 }, /option "heartbeatMs" .* got 2147483648/],
  ['maxAgeMs', { maxAgeMs: -5 }, /option "maxAgeMs" .* got -5/],
  ['maxAgeJitterMs', { maxAgeMs: 1000, maxAgeJitterMs: 1000 }, /option "maxAgeJitterMs" must be less than maxAgeMs \(1000\), got 1000/],
  ['maxAgeJitterMs', { maxAgeMs: 0, maxAgeJitterMs: 2 ** 31 }, /option "maxAgeJitterMs" must be small enough/],
  ['logIntervalMs', { logIntervalMs: 0 }, /option "logIntervalMs" .* got 0/],
  ['maxBufferedBytes', { maxBufferedBytes: 0 }, /option "maxBufferedBytes" .* got 0/],
  ['maxStalledHeartbeats', { maxStalledHeartbeats: 0 }, /option "maxStalledHeartbeats" .* got 0/],
  ['initialEvent', { initialEvent: 'hello' }, /option "initialEvent" must be a function .* got "hello"/],
  // One option set against the default of its pair: the error names the option the user set.
  ['maxAgeMs', { maxAgeMs: 60000 }, /option "maxAgeMs" must be 0 or more than maxAgeJitterMs \(60000, its default: set maxAgeJitterMs too\), got 60000/],
  ['retryMs', { retryMs: 500 }, /option "retryMs" must be at least retryJitterMs \(1000, its default: set retryJitterMs too\), got 500/],
  ['tarpitMs', { tarpitMs: 1000 }, /option "tarpitMs" must be 0 or more than tarpitJitterMs \(1500, its default: set tarpitJitterMs too\), got 1000/],
  ['retryAfterSeconds', { retryAfterSeconds: 120 },
    /option "retryAfterSeconds" must be at most maxRetryAfterSeconds \(60, its default: set maxRetryAfterSeconds too\), got 120/],
  ['maxAgeMs', { maxAgeMs: 2 ** 31 - 1 }, /option "maxAgeMs" must be small enough to fit a timer \(2\^31 - 1 ms\) when added to maxAgeJitterMs \(60000, its default/],
  ['maxAgeJitterMs', { maxAgeJitterMs: 300_000 }, /option "maxAgeJitterMs" must be less than maxAgeMs \(300000, its default: set maxAgeMs too\), got 300000/],
  ['tarpitJitterMs', { tarpitMs: 1000, tarpitJitterMs: 1000 }, /option "tarpitJitterMs" must be less than tarpitMs \(1000\), got 1000/],
  ['maxRetryAfterSeconds', { maxRetryAfterSeconds: 3, retryAfterSeconds: 4 }, /option "maxRetryAfterSeconds" must be at least retryAfterSeconds \(4\), got 3/],
  ['random', { random: 4 }, /option "random" must be a function .* got 4/],
  ['maxclients', { maxclients: 5 }, /option "maxclients" must be one of the known options \(.*maxClients.*\), got 5/]
]

for (const [name, input, message] of BAD) {
  t.test(`bad ${name} is refused at register time: ${JSON.stringify(input) ?? ''}`, async (t) => {
    t.throws(() => normalizeOptions(input), { code: 'TOWER_SSE_OPTION', name: 'TowerSseOptionError', option: name, message })
    const app = Fastify()
    await t.rejects(async () => { await app.register(towerSse, input) }, { code: 'TOWER_SSE_OPTION', option: name, message },
      'the same error surfaces from app.register()')
  })
}

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
