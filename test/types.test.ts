// Compile-time checks run by `npm run typecheck` (tsc over test/); the runtime part checks the
// module shapes that CommonJS, ESM and TypeScript consumers rely on.
import t from 'tap'
import Fastify from 'fastify'
import towerSse, { towerSse as named, type BroadcastResult, type SseStats, type TowerSseOptions } from '../lib/index'
import { injectStream } from '../lib/testing'

const good: TowerSseOptions = { maxClients: 10, initialEvent: (client) => ({ data: { id: client.id } }) }
// @ts-expect-error maxClients is a number
const badType: TowerSseOptions = { maxClients: '10' }
// @ts-expect-error unknown options are a compile error too
const unknown: TowerSseOptions = { maxclients: 10 }
void badType
void unknown

t.test('fastify.sse is typed through declaration merging', async (t) => {
  const app = Fastify()
  await app.register(towerSse, good)
  const stream = await injectStream(app, '/api/events')
  const [first] = await stream.events(1)
  const { id, delivered }: BroadcastResult = await app.sse.broadcast({ a: 1 }, { event: 'x' })
  const [x] = await stream.events(1)
  t.same([JSON.parse(first.data).id === undefined, x.event, x.id], [false, 'x', id], 'the stream got the initial event, then the broadcast with its id')
  await stream.close()
  const stats: SseStats = app.sse.stats()
  // @ts-expect-error broadcast options are checked
  void app.sse.broadcast('x', { evnt: 'typo' })
  // @ts-expect-error the registry's own methods are not part of fastify.sse
  const internal: unknown = app.sse.add
  t.equal(delivered, 1)
  t.match(id, /^[0-9a-z]+-1$/)
  t.equal(internal, undefined, 'nor are they reachable at run time')
  t.equal(stats.capacity, 10)
  await app.close()
})

t.test('require(\'tower-sse\') is the plugin, with default and named exports', async (t) => {
  const required = require('../lib/index')
  t.equal(typeof required, 'function')
  t.equal(required, named)
  t.equal(required.default, required)
  t.equal(required.towerSse, required)
  t.equal(required[Symbol.for('fastify.display-name')], 'tower-sse')
  t.equal(towerSse, required)
})
