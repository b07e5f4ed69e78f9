import t from 'tap'
import { startRedis, type RedisServer } from '../benchmarks/lib/redis-server'
import { connect, waitFor } from './fixtures/sse-connection'
import { notify, request, startTower, type RawResponse } from './fixtures/tower'

// Tower over a Redis that fails: POST /api/notify retries land once, and neither notify nor the
// stats route waits on a stalled Redis.

let redis: RedisServer
t.before(async () => { redis = await startRedis() })
t.teardown(() => redis.stop())

const note = { type: 'build', title: 'done', body: '' }

/** The answer, or an error naming the route if none comes within `ms` (a hang guard). */
function answered (what: string, reply: Promise<RawResponse>, ms = 5000): Promise<RawResponse> {
  let timer: NodeJS.Timeout | undefined
  const hung = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms) })
  return Promise.race([reply, hung]).finally(() => clearTimeout(timer))
}

t.test('Idempotency-Key: a retried notify lands once and answers the first id; a bad key is a 400 naming the header', async (t) => {
  const tower = await startTower({ redis: { url: redis.url, key: 'k1' } })
  t.teardown(() => tower.app.close())
  const stream = await connect(tower.port, '/api/events')
  t.teardown(() => stream.destroy())
  await stream.nextEvent(0)
  const first = await notify(tower.port, note, undefined, { 'idempotency-key': 'build-42' })
  const retry = await notify(tower.port, note, undefined, { 'idempotency-key': 'build-42' })
  t.equal(first.status, 200)
  t.equal(JSON.parse(retry.body).id, JSON.parse(first.body).id, 'the retry answers the first id')
  await notify(tower.port, { ...note, title: 'next' })
  await waitFor('the next notification', () => stream.events.length === 3)
  t.same(stream.events.slice(1).map((e) => JSON.parse(e.data).title), ['done', 'next'], 'the retried one was sent once')

  for (const bad of ['', 'a b', 'x'.repeat(129), 'é']) {
    const refused = await notify(tower.port, note, undefined, { 'idempotency-key': bad })
    t.equal(refused.status, 400, JSON.stringify(bad))
    t.match(JSON.parse(refused.body), { code: 'TOWER_NOTIFY_INVALID', message: /Idempotency-Key/ })
  }
})

t.test('Idempotency-Key is the producer\'s: another producer\'s same key publishes; the same key with another body is a 409 naming it', async (t) => {
  const secret = 'producer-token-1'
  const withToken = await startTower({ redis: { url: redis.url, key: 'k3' } }, { token: secret })
  t.teardown(() => withToken.app.close())
  const open = await startTower({ redis: { url: redis.url, key: 'k3' } })
  t.teardown(() => open.app.close())
  const auth = { authorization: `Bearer ${secret}`, 'idempotency-key': 'ci-build-42' }
  const mine = await notify(withToken.port, { ...note, title: 'Build FAILED' }, undefined, auth)
  const theirs = await notify(open.port, { ...note, title: 'Build passed' }, undefined, { 'idempotency-key': 'ci-build-42' })
  t.equal(mine.status, 200)
  t.equal(theirs.status, 200)
  t.not(JSON.parse(theirs.body).id, JSON.parse(mine.body).id, 'both published: the key is scoped to its producer')

  const again = await notify(withToken.port, { ...note, title: 'Build FAILED' }, undefined, auth)
  t.same(JSON.parse(again.body), { id: JSON.parse(mine.body).id, delivered: 0 }, 'the same key and body answers the first id')
  const other = await notify(withToken.port, { ...note, title: 'Build FAILED twice' }, undefined, auth)
  t.equal(other.status, 409)
  t.match(JSON.parse(other.body), { code: 'TOWER_SSE_IDEMPOTENCY_CONFLICT', message: /idempotencyKey "ci-build-42" was already used for a different event/ })
  const keys = await redis.command('KEYS', '{k3}:idem:*') as string[]
  t.equal(keys.length, 2, 'one stored key per producer')
  t.notOk(keys.some((key) => key.includes(secret)), 'the token is never stored, only its hash')
})

t.test('Redis stalled: notify answers 503 + Retry-After, and the stats route answers with the bus down', async (t) => {
  const stalled = await startRedis()
  t.teardown(() => stalled.stop())
  t.teardown(() => stalled.resume())
  const tower = await startTower({ redis: { url: stalled.url, key: 'k2' } })
  t.teardown(() => tower.app.close())
  // Its instance board connected and reporting (it reports once a second), so the listing waits on the stall.
  for (let tries = 0; await stalled.command('SCARD', '{k2}:instances') === 0; tries++) {
    if (tries === 50) throw new Error('the instance board never reported to Redis')
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  stalled.pause()
  const refused = await answered('notify', notify(tower.port, note))
  t.equal(refused.status, 503)
  t.match(JSON.parse(refused.body), { code: /^TOWER_SSE_(PUBLISH_UNKNOWN|BUS_UNAVAILABLE)$/ })
  t.ok(refused.headers['retry-after'], 'with Retry-After')
  await waitFor('the bus to leave up', () => tower.app.sse.stats().bus.state !== 'up', 3000)
  const stats = await answered('GET /api/events/stats', request(tower.port, 'GET', '/api/events/stats'))
  t.equal(stats.status, 200)
  t.match(JSON.parse(stats.body), { bus: { state: 'down' }, instancesUnavailable: true }, 'the instances Redis cannot list are left out, and said so')
})
