import t from 'tap'
import { startApp } from './fixtures/app'
import { startRedis } from '../benchmarks/lib/redis-server'
import { waitFor } from './fixtures/sse-connection'

t.test('events counts what was fanned out here (any instance\'s broadcasts); broadcasts counts this instance\'s published calls', async (t) => {
  const redis = await startRedis()
  t.teardown(() => redis.stop())
  const options = { heartbeatMs: 60_000, redis: { url: redis.url, key: 'stats' } }
  const a = await startApp(options)
  t.teardown(() => a.app.close())
  const b = await startApp(options)
  t.teardown(() => b.app.close())

  for (let n = 0; n < 3; n++) await a.app.sse.broadcast({ n })
  await t.rejects(a.app.sse.broadcast({ n: 3 }, { topic: 'not a\ntopic' }), { code: 'TOWER_SSE_BAD_TOPIC' })
  await b.app.sse.broadcast({ n: 4 })
  await waitFor('both instances to fan out all four events', () => a.app.sse.stats().events === 4 && b.app.sse.stats().events === 4)
  const [onA, onB] = [a.app.sse.stats(), b.app.sse.stats()]
  t.same([onA.events, onA.broadcasts], [4, 3], 'A fanned out 4 events, 3 of them its own calls (a refused call is none)')
  t.same([onB.events, onB.broadcasts], [4, 1], 'B fanned out the same 4, one its own')
})
