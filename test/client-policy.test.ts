import t from 'tap'
import { CLIENT_DEFAULTS, TowerSseClient, TowerSseClientOptionError } from '../lib/client'
import { classifyResponse, parseRetryAfterMs, serverErrorCode } from '../lib/client/policy'
import { backoffDelayMs, jitterUpMs } from '../lib/shared/backoff'
import { seededRandom } from './fixtures/client-seeded-random'

t.test('backoff: full jitter within [0, min(cap, base × 2^(n-1))) over many seeded draws', async (t) => {
  const random = seededRandom(7)
  const base = 1000
  const cap = 60_000
  for (let failures = 1; failures <= 12; failures++) {
    const ceiling = Math.min(cap, base * 2 ** (failures - 1))
    const draws = Array.from({ length: 2000 }, () => backoffDelayMs(failures, random, base, cap))
    const min = Math.min(...draws)
    const max = Math.max(...draws)
    if (min < 0 || max >= ceiling) t.fail(`failures ${failures}: draws in [${min}, ${max}] leave [0, ${ceiling})`)
    // Full jitter: the draws cover the whole window, not a band near its top.
    t.ok(min < ceiling * 0.05 && max > ceiling * 0.95, `failures ${failures}: draws span [0, ${ceiling}) (${min}..${max})`)
  }
  t.equal(backoffDelayMs(1000, () => 0.999999, base, cap), 59_999, 'a huge failure count stays under the cap')
  t.equal(backoffDelayMs(3, () => 0, base, cap), 0)
  t.throws(() => backoffDelayMs(0, random, base, cap), { code: 'TOWER_SSE_CLIENT_ARGUMENT', message: /failures must be an integer >= 1, got 0/ })
})

t.test('jitterUpMs stretches a wait by up to ratio, never shortens it', async (t) => {
  const random = seededRandom(11)
  const draws = Array.from({ length: 2000 }, () => jitterUpMs(1000, 0.5, random))
  t.ok(draws.every((d) => d >= 1000 && d <= 1500), 'all draws in [1000, 1500]')
  t.ok(new Set(draws).size > 200, 'and spread over the window')
  t.equal(jitterUpMs(1000, 0, random), 1000, 'ratio 0 is the value itself')
})

t.test('Retry-After: delay-seconds or HTTP-date (RFC 9110)', async (t) => {
  const now = Date.parse('2025-01-01T00:00:00Z')
  t.equal(parseRetryAfterMs('5', now), 5000)
  t.equal(parseRetryAfterMs(' 120 ', now), 120_000)
  t.equal(parseRetryAfterMs('Wed, 01 Jan 2025 00:00:07 GMT', now), 7000)
  t.equal(parseRetryAfterMs('Tue, 31 Dec 2024 23:59:00 GMT', now), 0, 'a past date means now')
  t.equal(parseRetryAfterMs('soon', now), null)
  t.equal(parseRetryAfterMs('-3', now), null, 'not a year')
  t.equal(parseRetryAfterMs('2025-01-01T00:00:09Z', now), null, 'not an HTTP-date')
  t.equal(parseRetryAfterMs('Wed, 01 Jan 2025 00:00:07 PST', now), null, 'HTTP-dates are GMT')
  t.equal(parseRetryAfterMs(null, now), null)
})

t.test('classifyResponse: stream, wait, done or stop', async (t) => {
  t.same(classifyResponse(200, 'text/event-stream; charset=utf-8'), { kind: 'stream' })
  t.same(classifyResponse(200, 'TEXT/EVENT-STREAM'), { kind: 'stream' })
  t.match(classifyResponse(200, 'text/event-streams'), { kind: 'stop' })
  t.match(classifyResponse(200, 'text/html'), { kind: 'stop', message: /expected a text\/event-stream response, got content-type "text\/html"/ })
  t.match(classifyResponse(200, null), { kind: 'stop' })
  t.same(classifyResponse(503, null), { kind: 'wait', reason: 'refused' })
  t.same(classifyResponse(429, null), { kind: 'wait', reason: 'refused' })
  t.same(classifyResponse(500, null), { kind: 'wait', reason: 'server-error' })
  t.same(classifyResponse(502, null), { kind: 'wait', reason: 'server-error' })
  t.same(classifyResponse(204, null), { kind: 'done' }, '204: the client has the whole answer')
  for (const status of [400, 401, 403, 404, 410]) {
    t.match(classifyResponse(status, null), { kind: 'stop', message: new RegExp(`HTTP ${status}`) }, `${status} stops`)
  }
})

t.test('serverErrorCode: the plugin\'s own `event: error` only; any other is an application\'s named event', async (t) => {
  t.equal(serverErrorCode('{"code":"TOWER_SSE_STREAM_FAILED"}'), 'TOWER_SSE_STREAM_FAILED')
  t.equal(serverErrorCode('{"code":"TOWER_SSE_PRODUCER_LOST","more":1}'), 'TOWER_SSE_PRODUCER_LOST')
  for (const data of ['', 'oops', '"TOWER_SSE_STREAM_FAILED"', 'null', '[{"code":"TOWER_SSE_X"}]', '{"code":"E_APP"}', '{"code":"TOWER_SSE_"}',
    '{"code":"tower_sse_stream_failed"}', '{"code":42}', '{"error":"TOWER_SSE_STREAM_FAILED"}', '{"code":"TOWER_SSE_X\\n"}']) {
    t.equal(serverErrorCode(data), null, JSON.stringify(data))
  }
})

t.test('options are validated in the constructor with errors that name them', async (t) => {
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ backoffBaseMs: 0 }, /option "backoffBaseMs" must be a number between 1 and \d+, got 0/],
    [{ backoffCapMs: 500 }, /option "backoffCapMs" must be at least backoffBaseMs \(1000\), got 500/],
    [{ retryMs: -1 }, /option "retryMs" must be .*got -1/],
    [{ retryMs: '5s' }, /option "retryMs" must be .*got "5s"/],
    [{ retryAfterJitterRatio: Number.NaN }, /option "retryAfterJitterRatio"/],
    [{ healthyAfterMs: Infinity }, /option "healthyAfterMs"/],
    [{ random: 4 }, /option "random" must be a function/],
    [{ fetch: 'no' }, /option "fetch" must be a fetch function/],
    [{ headers: { authorization: 1 } }, /option "headers" must be an object of string header values/],
    [{ lastEventId: 'a\nb' }, /option "lastEventId" must be a string without CR, LF or NUL/],
    [{ retry: 1000 }, /option "retry" must be one of the known options/]
  ]
  for (const [options, message] of bad) {
    t.throws(() => new TowerSseClient('http://127.0.0.1:9/', options), { name: 'TowerSseClientOptionError', code: 'TOWER_SSE_CLIENT_OPTION', message }, JSON.stringify(options))
  }
  const circular: Record<string, unknown> = {}
  circular.self = circular
  t.throws(() => new TowerSseClient('http://127.0.0.1:9/', { headers: circular as Record<string, string> }),
    /option "headers" must be an object of string header values, got \[object Object\]/, 'a value JSON cannot show is still named')
  t.throws(() => new TowerSseClient(42 as unknown as string), { name: 'SyntaxError', message: /"42" is not a valid URL/ },
    'as EventSource: String(url), then a SyntaxError DOMException when it does not parse')
  t.throws(() => new TowerSseClient('http://127.0.0.1:9/', { withCredentials: 'yes' as unknown as boolean }), /option "withCredentials" must be true or false, got "yes"/)
  t.throws(() => new TowerSseClient('http://127.0.0.1:9/', { shareAcrossTabs: 1 as unknown as boolean }), /option "shareAcrossTabs" must be true or false, got 1/)
  const error = t.throws(() => new TowerSseClient('http://127.0.0.1:9/', { backoffCapMs: 10 })) as TowerSseClientOptionError
  t.equal(error.option, 'backoffCapMs')
  t.ok(Object.isFrozen(CLIENT_DEFAULTS))
})
