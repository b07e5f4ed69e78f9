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
  const tower = await startTower({ redis: redis.url, redisKey: 'k1' })
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

t.test('Redis stalled: notify answers 503 + Retry-After, and the stats route answers with the bus down', async (t) => {
  const stalled = await startRedis()
  t.teardown(() => stalled.stop())
  t.teardown(() => stalled.resume())
  const tower = await startTower({ redis: stalled.url, redisKey: 'k2' })
  t.teardown(() => tower.app.close())
  // Its instance board connected and reporting (it reports once a second), so the listing waits on the stall.
  for (let tries = 0; await stalled.command('SCARD', 'k2:instances') === 0; tries++) {
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
