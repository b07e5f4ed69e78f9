import Fastify from 'fastify'
import t from 'tap'
import { defaultKeyFn, keyFromClientId, type KeyFn } from '../lib/index'

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

t.test('keyFromClientId: a well-formed id when given, else the address', async (t) => {
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7', headers: { 'x-client-id': 'my-cli' } }), 'id:my-cli')
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7', url: '/?clientId=editor' }), 'id:editor')
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7', headers: { 'x-client-id': 'has space' } }), 'ip:10.0.0.7', 'a malformed id is no id')
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7', headers: { 'x-client-id': 'x'.repeat(129) } }), 'ip:10.0.0.7', 'nor is a too long one')
  t.equal(await keyOf(keyFromClientId, { remoteAddress: '10.0.0.7' }), 'ip:10.0.0.7')
})
