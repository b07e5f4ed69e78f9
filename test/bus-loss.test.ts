import t from 'tap'
import { instance, liveInstance, open, received, server } from './fixtures/bus-instances'
import { waitFor } from './fixtures/sse-connection'

// Redis losing or rolling back events (issue 19): a snapshot restore, a deleted entry, ids going
// backwards, a reused sequence number — each ends in a resync, never a silent gap.

let keys = 0

t.test('restart from an RDB snapshot losing a tail: a client resuming from before the loss gets a resync, not the survivors', async (t) => {
  const { redis, key, a, live } = await liveInstance(t, { persistent: true })
  const ids: string[] = []
  for (let n = 0; n < 5; n++) ids.push((await a.app.sse.broadcast({ n })).id)
  await redis.command('SAVE')
  for (let n = 5; n < 10; n++) ids.push((await a.app.sse.broadcast({ n })).id)
  await waitFor('ten live events', () => live.events.length === 10)
  await redis.kill()
  await redis.start()

  const fresh = await instance(t, redis.url, key)
  const resumed = await open(t, fresh, { 'last-event-id': ids[2] })
  const first = await resumed.nextEvent(0)
  t.equal(first.event, 'resync', 'events 3 and 4 survived, 5-9 did not: no replay can be trusted')

  await waitFor('the old instance to be up', () => a.app.sse.stats().bus.state === 'up', 10_000)
  await fresh.app.sse.broadcast({ n: 10 })
  await waitFor('the next event on the live stream', () => received(live).at(-1) === 10)
  t.same(received(live), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 'resync', 10], 'the live stream had seen 5-9: told once, then goes on')
  t.equal(a.app.sse.stats().bus.discontinuities, 1)
})

t.test('restart from a snapshot holding every event delivered: the live stream goes on without a resync', async (t) => {
  const { redis, a, live } = await liveInstance(t, { persistent: true })
  for (let n = 0; n < 3; n++) await a.app.sse.broadcast({ n })
  await redis.command('SAVE')
  await redis.kill()
  await redis.start()
  await waitFor('the bus to be up again', () => a.app.sse.stats().bus.state === 'up', 10_000)
  let published = false
  for (let tries = 0; !published && tries < 50; tries++) {
    published = await a.app.sse.broadcast({ n: 3 }).then(() => true, async () => { await new Promise((resolve) => setTimeout(resolve, 100)); return false })
  }
  t.ok(published, 'publishing again after the restart')
  await waitFor('3 on the live stream', () => received(live).at(-1) === 3)
  t.same(received(live), [0, 1, 2, 3], 'the new epoch\'s marker names the last event this stream had: nothing lost, no resync')
  t.equal(a.app.sse.stats().bus.discontinuities, 0)
})

t.test('restart of a server that provably loses nothing (AOF, fsync always): no resync, and old ids still resume', async (t) => {
  const { redis, key, a, live } = await liveInstance(t, { persistent: true, args: ['--appendonly', 'yes', '--appendfsync', 'always'] })
  const ids: string[] = []
  for (let n = 0; n < 3; n++) ids.push((await a.app.sse.broadcast({ n })).id)
  await redis.kill()
  await redis.start()
  const fresh = await instance(t, redis.url, key)
  const resumed = await open(t, fresh, { 'last-event-id': ids[0] })
  await waitFor('the replay', () => resumed.events.length === 2)
  t.same(received(resumed), [1, 2], 'the epoch survived the restart: replayed, not resynced')
  await fresh.app.sse.broadcast({ n: 3 })
  await waitFor('3 on the old instance\'s live stream', () => received(live).at(-1) === 3, 10_000)
  t.same(received(live), [0, 1, 2, 3], 'no resync')
})

t.test('an entry deleted from the middle of the stream: a resume across the hole gets a resync, not the rest', async (t) => {
  const redis = await server(t)
  const key = `l${++keys}`
  const a = await instance(t, redis.url, key)
  const ids: string[] = []
  for (let n = 0; n < 6; n++) ids.push((await a.app.sse.broadcast({ n })).id)
  await redis.command('XDEL', `{${key}}:stream`, ids[3].split('-').slice(1).join('-'))
  const fresh = await instance(t, redis.url, key)
  const across = await open(t, fresh, { 'last-event-id': ids[1] })
  t.equal((await across.nextEvent(0)).event, 'resync', 'found its id, but not every event after it')
  const after = await open(t, fresh, { 'last-event-id': ids[4] })
  await fresh.app.sse.broadcast({ n: 6 })
  await waitFor('the events after the hole', () => received(after).at(-1) === 6)
  t.same(received(after), [5, 6], 'a resume that does not cross the hole replays')
})

t.test('ids going backwards inside an epoch: publishes settle, streams resync, delivery goes on', async (t) => {
  const { redis, key, a, live } = await liveInstance(t)
  let lastId = ''
  for (let n = 0; n < 3; n++) lastId = (await a.app.sse.broadcast({ n })).id
  const stream = `{${key}}:stream`
  const meta = `{${key}}:meta`
  const seq = await redis.command('HGET', meta, 's') as string
  // An entry stamped an hour ahead (a primary whose clock ran ahead), delivered, then lost in a failover.
  const epoch = await redis.command('HGET', meta, 'e') as string
  const next = await redis.command('HINCRBY', meta, 's', 1) as number
  const future = await redis.command('XADD', stream, `${Date.now() + 3_600_000}-0`, 'e', epoch, 'n', next, 'd', '{"n":99}') as string
  await waitFor('the entry from the future', () => received(live).at(-1) === 99)
  // The replica that took over never had it: stream, last id and counter all as before it.
  await redis.command('XDEL', stream, future)
  await redis.command('XSETID', stream, lastId.split('-').slice(1).join('-'))
  await redis.command('HSET', meta, 's', seq)

  const late = await a.app.sse.broadcast({ n: 3 })
  t.match(late.id, /^[0-9a-z]+-\d+-\d+$/, 'a publish below the last delivered id still settles (published)')
  await waitFor('the rollback to be seen', () => a.app.sse.stats().bus.discontinuities === 1)
  const after = await a.app.sse.broadcast({ n: 4 })
  t.equal(after.delivered, 1, 'the next publish is delivered here again')
  await waitFor('4 on the live stream', () => received(live).at(-1) === 4)
  t.same(received(live), [0, 1, 2, 99, 'resync', 4], 'one resync, then on')
  t.not(after.id.split('-')[0], late.id.split('-')[0], 'in a new epoch')
})

t.test('a sequence number met again inside an epoch: never silently dropped, the streams resync', async (t) => {
  const { redis, key, a, live } = await liveInstance(t)
  for (let n = 0; n < 3; n++) await a.app.sse.broadcast({ n })
  // The counter one behind the stream (restored apart from it): the next publish reuses the last number.
  await redis.command('HINCRBY', `{${key}}:meta`, 's', -1)
  const reused = await a.app.sse.broadcast({ n: 3 })
  t.equal(reused.delivered, 0, 'settled as published, not delivered under a number already used')
  await a.app.sse.broadcast({ n: 4 })
  await waitFor('4 on the live stream', () => received(live).at(-1) === 4)
  t.same(received(live), [0, 1, 2, 'resync', 4])
})
