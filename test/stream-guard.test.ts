import t from 'tap'
import Fastify from 'fastify'
import towerSse, { streamGuard } from '../lib'
import { normalizeOptions } from '../lib/options'
import { injectStream } from '../lib/testing'

const guarded = { allowedHosts: ['app.example', '*.corp.test'], allowedOrigins: ['https://app.example', 'http://localhost:5173'] }

t.test('allowedHosts / allowedOrigins: the stream route refuses first, before admission counts anything', async (t) => {
  const app = Fastify()
  await app.register(towerSse, { maxClients: 1, guard: guarded })
  t.teardown(() => app.close())
  const held = await injectStream(app, { url: '/api/events', headers: { host: 'app.example' } })
  t.equal(held.statusCode, 200, 'an allowed Host, no Origin')
  const refused: Array<[Record<string, string>, string]> = [
    [{ host: 'evil.example' }, 'TOWER_SSE_HOST_NOT_ALLOWED'],
    [{ host: 'app.example.evil.test' }, 'TOWER_SSE_HOST_NOT_ALLOWED'],
    [{ host: 'corp.test' }, 'TOWER_SSE_HOST_NOT_ALLOWED'],
    [{ host: 'app.example', origin: 'https://evil.example' }, 'TOWER_SSE_ORIGIN_NOT_ALLOWED'],
    [{ host: 'app.example', origin: 'http://app.example' }, 'TOWER_SSE_ORIGIN_NOT_ALLOWED'],
    [{ host: 'app.example', origin: 'https://app.example:8443' }, 'TOWER_SSE_ORIGIN_NOT_ALLOWED'],
    [{ host: 'app.example', origin: 'null' }, 'TOWER_SSE_ORIGIN_NOT_ALLOWED']
  ]
  for (const [headers, code] of refused) {
    const res = await app.inject({ url: '/api/events', headers })
    t.same([res.statusCode, res.json().code], [403, code], JSON.stringify(headers))
  }
  t.same([app.sse.stats().accepted, app.sse.stats().rejected], [1, 0], 'a 403, not the 503 a full registry would give: admission saw none of them')
  await held.close()
  const fromPage = await injectStream(app, { url: '/api/events', headers: { host: 'a.corp.test:8080', origin: 'http://localhost:5173' } })
  t.equal(fromPage.statusCode, 200, '*.domain with a port, and an exact allowed origin')
  await fromPage.close()
})

t.test('streamGuard(): the same check on the app\'s own routes', async (t) => {
  const app = Fastify()
  const guard = streamGuard(guarded)
  t.teardown(() => app.close())
  app.post('/api/notify', { onRequest: guard }, async () => ({ ok: true }))
  await app.ready()
  const post = (headers: Record<string, string>) => app.inject({ method: 'POST', url: '/api/notify', headers: { 'content-type': 'application/json', ...headers }, payload: '{}' })
  t.same((await post({ host: 'app.example', origin: 'https://evil.example' })).json().code, 'TOWER_SSE_ORIGIN_NOT_ALLOWED')
  t.same((await post({ host: 'evil.example' })).json().code, 'TOWER_SSE_HOST_NOT_ALLOWED')
  t.equal((await post({ host: 'app.example', origin: 'https://app.example' })).statusCode, 200)
})

t.test('bad allowedHosts / allowedOrigins are refused at register time, naming the entry', async (t) => {
  t.throws(() => normalizeOptions({ guard: { allowedHosts: ['app.example', 'evil com'] } }), { option: 'guard.allowedHosts', message: /got "evil com"/ })
  t.throws(() => normalizeOptions({ guard: { allowedHosts: ['app.example:443'] } }), { option: 'guard.allowedHosts', message: /got "app.example:443"/ })
  t.throws(() => normalizeOptions({ guard: { allowedHosts: [] } }), { option: 'guard.allowedHosts', message: /non-empty array/ })
  t.throws(() => normalizeOptions({ guard: { allowedOrigins: ['https://app.example/'] } }), { option: 'guard.allowedOrigins', message: /exact origins/ })
  t.throws(() => normalizeOptions({ guard: { allowedOrigins: ['https://APP.example'] } }), { option: 'guard.allowedOrigins', message: /got "https:\/\/APP.example"/ })
  t.throws(() => normalizeOptions({ guard: { allowedOrigins: 'https://app.example' as never } }), { option: 'guard.allowedOrigins', message: /non-empty array/ })
  t.throws(() => normalizeOptions({ guard: { allowedHost: ['app.example'] } as never }), { option: 'guard.allowedHost', message: /did you mean "allowedHosts"/ })
  t.throws(() => streamGuard({ allowedOrigins: ['https://app.example/'] }), { option: 'streamGuard.allowedOrigins', message: /exact origins/ }, 'streamGuard() checks its lists the same way')
})
