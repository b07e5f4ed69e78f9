import fc from 'fast-check'
import t from 'tap'
import { parseRedisUrl, redactRedisUrl } from '../lib/bus/redis/url'

function isValid (url: string): boolean {
  try {
    parseRedisUrl(url)
    return true
  } catch {
    return false
  }
}

// What a user name or password may hold as typed into a URL: the characters that end userinfo
// early for a naive reader (@ and :), percent-encoded ones (%40 is @) and the rest of RFC 3986's.
const piece = fc.array(fc.constantFrom('@', ':', '%40', '%3A', 'a', 'Z', '9', '-', '.', '_', '~', '!', '$', '&', "'", '(', ')', '*', '+', ',', ';', '=', '[', ']'), { minLength: 1, maxLength: 12 })
  .map((chars) => chars.join(''))

t.test('the whole userinfo is hidden, however many @ and : it holds', async () => {
  const forms: Array<(userinfo: string) => [string, string]> = [
    (userinfo) => [`redis://${userinfo}@cache.internal:6379/2`, 'redis://***@cache.internal:6379/2'],
    (userinfo) => [`rediss://${userinfo}@[::1]:6380`, 'rediss://***@[::1]:6380'],
    (userinfo) => [`redis+sentinel://${userinfo}@h1:26379,h2:26379/mymaster?db=1`, 'redis+sentinel://***@h1:26379,h2:26379/mymaster?db=1'],
    (userinfo) => [`redis+cluster://${userinfo}@h1:7000,h2:7001`, 'redis+cluster://***@h1:7000,h2:7001']
  ]
  fc.assert(fc.property(piece, fc.option(piece, { nil: undefined }), fc.constantFrom(...forms), (user, password, form) => {
    const [url, redacted] = form(password === undefined ? user : `${user}:${password}`)
    const shown = redactRedisUrl(url)
    // A URL the parsers refuse (a Sentinel userinfo with bad percent-encoding) is its scheme only.
    return shown === (isValid(url) ? redacted : `${url.split('//')[0]}//…`)
  }), { numRuns: 500 })
})

t.test('a password parameter is hidden, under any spelling of its name', async (t) => {
  t.equal(redactRedisUrl('redis+sentinel://app:s3cret@h:1,h:2/m?db=1&sentinelPassword=t0p'), 'redis+sentinel://***@h:1,h:2/m?db=1&sentinelPassword=***')
  t.equal(redactRedisUrl('redis+sentinel://h:1/m?sentinel%50assword=t0p&db=2'), 'redis+sentinel://h:1/m?sentinel%50assword=***&db=2')
  t.equal(redactRedisUrl('redis://h:1/0?password=t0p#x'), 'redis://h:1/0?password=***')
  t.equal(redactRedisUrl('redis://h:1/0?db=1&Password=a&password=b'), 'redis://h:1/0?db=1&Password=***&password=***')
  t.equal(redactRedisUrl('redis://h:1/0'), 'redis://h:1/0', 'nothing to hide: as given')
  t.equal(redactRedisUrl('redis://tokenonly@h:1'), 'redis://***@h:1', 'a lone user name may be a token')
})

t.test('an invalid URL is never shown whole: where its userinfo ends is unknown', async (t) => {
  t.equal(redactRedisUrl('redis://u:p@ss@[bad'), 'redis://…')
  t.equal(redactRedisUrl('redis+sentinel://u:s3cret@h:1/a b'), 'redis+sentinel://…')
  t.equal(redactRedisUrl('redis+sentinel://u:s3cret@h:1/m?x=1'), 'redis+sentinel://…')
  t.equal(redactRedisUrl('s3cret@host'), '…', 'no scheme: nothing')
  t.equal(redactRedisUrl(`${'a'.repeat(40)}://u:p@h`), '…', 'a scheme that is no scheme')
  // Any text at all: shown only as a scheme, unless the parser accepts it.
  fc.assert(fc.property(fc.oneof(fc.string(), fc.string().map((s) => `redis://${s}`), fc.string().map((s) => `redis+sentinel://${s}`)), (text) => {
    const shown = redactRedisUrl(text)
    return shown.endsWith('…') ? /^([A-Za-z][A-Za-z0-9+.-]*:(\/\/)?)?…$/.test(shown) : isValid(text)
  }), { numRuns: 1000 })
})

t.test('credentials set through the URL API (percent-encoded by it) are hidden whole', async () => {
  fc.assert(fc.property(fc.string({ unit: 'grapheme', minLength: 1 }), fc.string({ unit: 'grapheme' }), (user, password) => {
    const url = new URL('redis://cache.internal:6379/1')
    url.username = user
    url.password = password
    return redactRedisUrl(url.href) === 'redis://***@cache.internal:6379/1'
  }), { numRuns: 300 })
})

t.test('the Cluster form: its nodes, credentials and TLS; nothing after the nodes; shown without its password', async (t) => {
  t.same(parseRedisUrl('redis+cluster://10.0.0.1:7000,[::1]:7001,node-3:7002'), {
    kind: 'cluster', nodes: [{ host: '10.0.0.1', port: 7000 }, { host: '::1', port: 7001 }, { host: 'node-3', port: 7002 }], tls: false
  })
  t.same(parseRedisUrl('rediss+cluster://app:p%40ss@h:1/'), { kind: 'cluster', nodes: [{ host: 'h', port: 1 }], tls: true, username: 'app', password: 'p@ss' })
  t.throws(() => parseRedisUrl('redis+cluster://h:1/0'), { message: 'the Redis URL must be a redis+cluster:// URL with nothing after its nodes (no path, no parameters)' })
  t.throws(() => parseRedisUrl('redis+cluster://h:1?password=x'), { message: /with nothing after its nodes/ })
  t.throws(() => parseRedisUrl('redis+cluster://h:1,h'), { message: 'the Redis URL must be a redis+cluster:// URL whose nodes are host:port, not "h"' })
  t.throws(() => parseRedisUrl('redis+cluster://h:70000'), { message: 'the Redis URL must be a redis+cluster:// URL whose node ports are 1-65535, not "h:70000"' })
  t.throws(() => parseRedisUrl('redis+cluster://u:%zz@h:1'), { message: /redis\+cluster:\/\/ URL with valid percent-encoding in its password/ })
  t.equal(redactRedisUrl('redis+cluster://app:s3cret@h:1,h:2'), 'redis+cluster://***@h:1,h:2')
  t.equal(redactRedisUrl('redis+cluster://app:s3cret@h:1/x'), 'redis+cluster://…')
})
