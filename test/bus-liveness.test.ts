import t from 'tap'
import { reaches, received, relayedPair as pair, STATE_SAFETY_NET_MS } from './fixtures/bus-instances'
import { isReader } from '../benchmarks/lib/fault-relay'
import { socketsOn } from '../benchmarks/lib/time-wait'
import { waitFor } from './fixtures/sse-connection'
import type { TestApp } from './fixtures/app'

// A bus that knows when it is deaf (issue 31, items 1-2): an instance whose connections to Redis
// lead nowhere (half-open, wedged reader, stalled server) says 'down', recovers after the heal and
// reads on from its cursor; each state is awaited and its time reported (about 5 s each on a quiet
// machine, see reaches() in fixtures/bus-instances.ts). (Told and closed when deaf longer: bus-deaf.test.ts.)

const state = (app: TestApp): string => app.app.sse.stats().bus.state

t.test('a half-open partition of one instance: down, up again after the heal, every event meanwhile delivered from its cursor', async (t) => {
  const { relay, a, b, onA } = await pair(t)
  relay.halfOpen()
  await reaches(t, 'A to say down', () => state(a) === 'down')
  for (let n = 1; n <= 5; n++) await b.app.sse.broadcast({ n })
  t.same(received(onA), [0], 'nothing reaches A meanwhile')
  relay.heal()
  await reaches(t, 'A to be up again', () => state(a) === 'up')
  await reaches(t, 'A to read on', () => received(onA).length === 6)
  t.same(received(onA), [0, 1, 2, 3, 4, 5], 'resumed from its cursor: in order, nothing lost, no resync')
  t.equal(a.app.sse.stats().bus.discontinuities, 0)
  await a.app.sse.broadcast({ n: 6 })
  await waitFor('A\'s own event', () => received(onA).at(-1) === 6, STATE_SAFETY_NET_MS)
})

t.test('only the reader wedged (its socket leads nowhere, Redis and the publisher fine): detected, torn down and read on', async (t) => {
  const { relay, a, b, onA } = await pair(t)
  relay.halfOpen(isReader)
  for (let n = 1; n <= 3; n++) await b.app.sse.broadcast({ n })
  await reaches(t, 'A to say down', () => state(a) === 'down')
  await reaches(t, 'A to be up again', () => state(a) === 'up')
  await reaches(t, 'A to read on', () => received(onA).length === 4)
  t.same(received(onA), [0, 1, 2, 3], 'in order, nothing lost, no resync')
})

t.test('Redis stalled (SIGSTOP) past the connections\' deadline: down, connections dropped, up again after SIGCONT, streams read on', async (t) => {
  const { redis, a, b, onA } = await pair(t)
  t.teardown(() => redis.resume())
  // The connections the instances hold to Redis (A's through the relay), as the kernel lists them.
  const held = new Set(socketsOn(redis.port).filter((end) => end.side === 'server' && end.state === 'ESTABLISHED').map((end) => end.client))
  redis.pause()
  await reaches(t, 'A to say down', () => state(a) === 'down')
  await reaches(t, 'B to say down', () => state(b) === 'down')
  // Past the command deadline (2.5 s) both instances drop those connections and reconnect: awaited
  // (closed by their client side, so none is ESTABLISHED any more, in two reads that agree: one read
  // of the kernel's table can skip a socket), rather than slept for, before Redis wakes up.
  const open = (): number => socketsOn(redis.port, { clients: held }).filter((end) => end.state === 'ESTABLISHED').length
  await reaches(t, `the instances to drop their ${held.size} connections to the stalled Redis`, () => open() === 0 && open() === 0)
  t.ok(held.size >= 4, `each instance's reader and publisher among them (${held.size})`)
  redis.resume()
  await reaches(t, 'A to be up again', () => state(a) === 'up')
  await reaches(t, 'B to be up again', () => state(b) === 'up')
  await b.app.sse.broadcast({ n: 1 })
  await reaches(t, 'the event after the stall on A', () => received(onA).length === 2)
  t.same(received(onA), [0, 1])
})
