import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import path from 'node:path'
import fc from 'fast-check'
import Fastify from 'fastify'
import t from 'tap'
import { addressKey, UNADDRESSED_KEY } from '../lib/admission/address-key'
import { keyByAddress, keyFromClientId, type KeyFn } from '../lib'
import { defaultKeyFn } from '../lib/admission/request-key'

/** The key `keyFn` gives a request injected from `remoteAddress` with `headers` and `url`. */
async function keyOf (keyFn: KeyFn, request: { remoteAddress: string, headers?: Record<string, string>, url?: string }, trustProxy?: string): Promise<string> {
  const app = Fastify({ trustProxy })
  app.get('/', async (req) => keyFn(req))
  const res = await app.inject({ method: 'GET', url: request.url ?? '/', remoteAddress: request.remoteAddress, headers: request.headers })
  await app.close()
  return res.body
}

t.test('the default key is the address Fastify resolves: nothing the client sends chooses it', async (t) => {
  t.equal(await keyOf(defaultKeyFn, { remoteAddress: '10.0.0.7' }), 'ip:10.0.0.7')
  t.equal(await keyOf(defaultKeyFn, { remoteAddress: '10.0.0.7', headers: { 'x-client-id': 'someone-else' }, url: '/?clientId=other' }), 'ip:10.0.0.7',
    'a client id is ignored')
  t.equal(await keyOf(defaultKeyFn, { remoteAddress: '10.0.0.7', headers: { 'x-forwarded-for': '192.0.2.1' } }), 'ip:10.0.0.7',
    'X-Forwarded-For from an untrusted peer is ignored')
  t.equal(await keyOf(defaultKeyFn, { remoteAddress: '10.0.0.1', headers: { 'x-forwarded-for': '192.0.2.1, 198.51.100.9' } }, '10.0.0.1'), 'ip:198.51.100.9',
    'behind a trusted proxy: the address the proxy saw, not one the client put before it')
})

t.test('keyFromClientId: a well-formed id within its address when given, else the address', async (t) => {
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7', headers: { 'x-client-id': 'my-cli' } }), 'id:my-cli@ip:10.0.0.7')
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7', url: '/?clientId=editor' }), 'id:editor@ip:10.0.0.7')
  t.not(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.8', headers: { 'x-client-id': 'my-cli' } }), 'id:my-cli@ip:10.0.0.7',
    'the same name from another address is another key: it can neither take the first one\'s send({ key }) nor its slots')
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7', headers: { 'x-client-id': 'has space' } }), 'ip:10.0.0.7', 'a malformed id is no id')
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7', headers: { 'x-client-id': 'x'.repeat(129) } }), 'ip:10.0.0.7', 'nor is a too long one')
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7' }), 'ip:10.0.0.7')
})

t.test('an address is one key whatever its spelling; a malformed forwarded value is no key of its own', async (t) => {
  const proxy = '10.0.0.1'
  const forwarded = async (value: string): Promise<string> => keyOf(defaultKeyFn, { remoteAddress: proxy, headers: { 'x-forwarded-for': value } }, proxy)
  const spellings = ['1.1.1.1', '::ffff:1.1.1.1', '::ffff:101:101', '0:0:0:0:0:ffff:0101:0101']
  t.same(await Promise.all(spellings.map(forwarded)), Array(4).fill('ip:1.1.1.1'))
  t.same(await Promise.all(['unknown', '<script>', '1.1.1.01', '999.1.1.1'].map(forwarded)), Array(4).fill(UNADDRESSED_KEY))
  t.equal(await forwarded('2001:db8:1:2:aaaa:bbbb:cccc:dddd'), await forwarded('2001:DB8:1:2::1'), 'one /64, one key')
  t.not(await forwarded('2001:db8:1:2::1'), await forwarded('2001:db8:1:3::1'), 'another /64, another key')
})

t.test('property: every form of an IPv4 address and every address of one IPv6 prefix give one key', async () => {
  const octet = fc.integer({ min: 0, max: 255 })
  fc.assert(fc.property(fc.tuple(octet, octet, octet, octet), (o) => {
    const hex = (a: number, b: number): string => ((a << 8) | b).toString(16)
    const key = addressKey(o.join('.'))
    return key === `ip:${o.join('.')}` && addressKey(`::ffff:${o.join('.')}`) === key &&
      addressKey(`::ffff:${hex(o[0], o[1])}:${hex(o[2], o[3])}`) === key && addressKey(`0:0:0:0:0:ffff:${hex(o[0], o[1])}:${hex(o[2], o[3])}`) === key
  }))
  const word = fc.integer({ min: 0, max: 0xffff })
  const address = fc.array(word, { minLength: 8, maxLength: 8 })
  fc.assert(fc.property(address, address, fc.integer({ min: 0, max: 128 }), (a, b, prefix) => {
    // Not IPv4-mapped: those count as IPv4.
    fc.pre(!(a.slice(0, 6).join() === '0,0,0,0,0,65535') && !(b.slice(0, 6).join() === '0,0,0,0,0,65535'))
    const grouping = { ipv4PrefixLength: 32, ipv6PrefixLength: prefix }
    const bits = (words: number[]): string => words.map((w) => w.toString(2).padStart(16, '0')).join('').slice(0, prefix)
    const same = addressKey(a.map((w) => w.toString(16)).join(':'), grouping) === addressKey(b.map((w) => w.toString(16).toUpperCase()).join(':'), grouping)
    return same === (bits(a) === bits(b))
  }))
})

t.test('keyByAddress: other prefixes, checked by name', async (t) => {
  t.equal(await keyOf(keyByAddress({ ipv4PrefixLength: 24 }), { remoteAddress: '192.0.2.77' }), 'ip:192.0.2.0/24')
  t.equal(await keyOf(keyByAddress({ ipv6PrefixLength: 128 }), { remoteAddress: '2001:db8::7' }), 'ip:2001:db8:0:0:0:0:0:7/128')
  t.throws(() => keyByAddress({ ipv6PrefixLength: 129 }), { code: 'TOWER_SSE_OPTION', message: /keyByAddress: ipv6PrefixLength" must be an integer between 0 and 128, got 129/ })
  t.throws(() => keyByAddress({ ipv4PrefixLength: 1.5 }), { code: 'TOWER_SSE_OPTION' })
})

t.test('in a network namespace: 5 addresses of one /64 hold one stream under maxClientsPerKey 1, another /64 its own', async (t) => {
  const ip = '/usr/sbin/ip'
  if (!existsSync(ip)) return t.plan(0, 'iproute2 is missing')
  const first = ['fd00:1::1', 'fd00:1::2', 'fd00:1::3', 'fd00:1::aaaa:1', 'fd00:1::ffff:ffff:ffff:fffe']
  const other = ['fd00:1:0:1::1', 'fd00:1:0:1::2']
  const setup = [`${ip} link set lo up`, ...[...first, ...other].map((a) => `${ip} -6 addr add ${a}/64 dev lo nodad`)].join(' && ')
  const script = path.join(__dirname, 'fixtures', 'ipv6-prefix-scenario.ts')
  const hooks = path.join(__dirname, '..', 'scripts', 'typescript-hooks.mjs')
  const run = spawnSync('unshare', ['-rn', 'sh', '-c', `${setup} && exec "$0" --import "$@"`, process.execPath, hooks, script, ...first, ...other],
    { encoding: 'utf8', timeout: 25_000 })
  t.equal(run.status, 0, run.stderr)
  const { statuses, open } = JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '{}') as { statuses: number[], open: number }
  t.same(statuses, [200, 429, 429, 429, 429, 200, 429], 'the first of each /64 is admitted, the rest of it refused per key')
  t.equal(open, 2)
})
