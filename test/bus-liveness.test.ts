import t from 'tap'
import { received, DETECT_MS, RECOVER_MS, relayedPair as pair } from './fixtures/bus-instances'
import { isReader } from '../benchmarks/lib/fault-relay'
import { waitFor } from './fixtures/sse-connection'
import type { TestApp } from './fixtures/app'

// A bus that knows when it is deaf (issue 31, items 1-2): an instance whose connections to Redis
// lead nowhere (half-open, wedged reader, stalled server) says 'down' within 5 s, recovers within
// 5 s of the heal and reads on from its cursor. (Told and closed when deaf longer: bus-deaf.test.ts.)

const state = (app: TestApp): string => app.app.sse.stats().bus.state

t.test('a half-open partition of one instance: down within 5 s, up within 5 s of the heal, every event meanwhile delivered from its cursor', async (t) => {
  const { relay, a, b, onA } = await pair(t)
  relay.halfOpen()
  await waitFor('A to say down', () => state(a) === 'down', DETECT_MS)
  for (let n = 1; n <= 5; n++) await b.app.sse.broadcast({ n })
  t.same(received(onA), [0], 'nothing reaches A meanwhile')
  relay.heal()
  await waitFor('A to be up again', () => state(a) === 'up', RECOVER_MS)
  await waitFor('A to read on', () => received(onA).length === 6, RECOVER_MS)
  t.same(received(onA), [0, 1, 2, 3, 4, 5], 'resumed from its cursor: in order, nothing lost, no resync')
  t.equal(a.app.sse.stats().bus.discontinuities, 0)
  await a.app.sse.broadcast({ n: 6 })
  await waitFor('A\'s own event', () => received(onA).at(-1) === 6)
})

t.test('only the reader wedged (its socket leads nowhere, Redis and the publisher fine): detected, torn down and read on', async (t) => {
  const { relay, a, b, onA } = await pair(t)
  relay.halfOpen(isReader)
  for (let n = 1; n <= 3; n++) await b.app.sse.broadcast({ n })
  await waitFor('A to say down', () => state(a) === 'down', DETECT_MS)
  await waitFor('A to be up again', () => state(a) === 'up', RECOVER_MS)
  await waitFor('A to read on', () => received(onA).length === 4, RECOVER_MS)
  t.same(received(onA), [0, 1, 2, 3], 'in order, nothing lost, no resync')
})

t.test('Redis stalled (SIGSTOP) past the connections\' deadline: down within 5 s, up within 5 s of SIGCONT, streams read on', async (t) => {
  const { redis, a, b, onA } = await pair(t)
  t.teardown(() => redis.resume())
  redis.pause()
  await waitFor('A to say down', () => state(a) === 'down', DETECT_MS)
  await waitFor('B to say down', () => state(b) === 'down', DETECT_MS)
  // Past the socket deadline (2.5 s): both instances' connections are torn down and reconnecting.
  await new Promise((resolve) => setTimeout(resolve, 3000))
  redis.resume()
  await waitFor('A to be up again', () => state(a) === 'up', RECOVER_MS)
  await waitFor('B to be up again', () => state(b) === 'up', RECOVER_MS)
  await b.app.sse.broadcast({ n: 1 })
  await waitFor('the event after the stall on A', () => received(onA).length === 2, RECOVER_MS)
  t.same(received(onA), [0, 1])
})
