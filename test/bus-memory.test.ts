import t from 'tap'
import { DEFAULTS } from '../lib'
import { MemoryBus } from '../lib/bus/memory'
import { broadcastIdempotency, busContract } from './fixtures/bus-contract'
import { startApp } from './fixtures/app'
import { connect, waitFor } from './fixtures/sse-connection'

busContract(t, async () => new MemoryBus(DEFAULTS.history.idempotencyWindowMs))
broadcastIdempotency(t, () => startApp())

t.test('memory bus: frames are written inside broadcast()', async (t) => {
  const { app, port } = await startApp()
  t.teardown(() => app.close())
  const c = await connect(port)
  await waitFor('open', () => app.sse.size === 1)
  const result = app.sse.broadcast('now')
  t.equal(app.sse.stats().events, 1, 'delivered before broadcast() returned')
  t.equal(app.sse.lastEventId, (await result).id)
  t.equal(app.sse.stats().bus.kind, 'memory')
  t.same([app.sse.size, app.sse.capacity, app.sse.hasRoom], [1, 200, true], 'the hub reads through to the registry')
  t.ok(Object.isFrozen(app.sse), 'and cannot be patched to reach it')
  t.equal(app.sse.stats().bus.state, 'up')
  c.destroy()
})

t.test('idProperty: the data carries the id the bus assigned, equal to the SSE id', async (t) => {
  const { app, port } = await startApp()
  t.teardown(() => app.close())
  const c = await connect(port)
  await waitFor('open', () => app.sse.size === 1)
  const first = await app.sse.broadcast({ title: 'a' }, { idProperty: 'id' })
  const second = await app.sse.broadcast({}, { idProperty: 'ref' })
  await waitFor('2 events', () => c.events.length === 2)
  t.equal(c.events[0].data, `{"id":"${first.id}","title":"a"}`, 'the id comes first, the rest untouched')
  t.equal(c.events[0].id, first.id)
  t.same(JSON.parse(c.events[1].data), { ref: second.id }, 'an empty object gets just the id')
  const refused: Array<[unknown, string]> = [
    ['text', 'id'], [[1, 2], 'id'], [null, 'id'], [{ id: 'mine' }, 'id'], [{ a: 1 }, 'not an identifier'], [{ a: 1 }, 'x'.repeat(65)],
    // What is encoded is checked: a toJSON that adds the name would forge the id a client parses.
    [{ toJSON: () => ({ id: 'forged' }) }, 'id'], [{ toJSON: () => 'text' }, 'id']
  ]
  for (const [data, idProperty] of refused) {
    await t.rejects(app.sse.broadcast(data, { idProperty }), { code: 'TOWER_SSE_BAD_ID_PROPERTY' }, `${JSON.stringify(data)} with ${idProperty.slice(0, 20)}`)
  }
  t.equal(app.sse.stats().events, 2, 'a refused broadcast is not published')
  c.destroy()
})
