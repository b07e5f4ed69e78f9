// Compile-time checks run by `npm run typecheck` (tsc over test/); the runtime part checks the
// module shapes that CommonJS, ESM and TypeScript consumers rely on.
import t from 'tap'
import Fastify from 'fastify'
import towerSse, { towerSse as named, type BroadcastResult, type SseHub, type SseStats, type TowerSseOptions } from '../lib'
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
  const required = require('../lib')
  t.equal(typeof required, 'function')
  t.equal(required, named)
  t.equal(required.default, required)
  t.equal(required.towerSse, required)
  t.equal(required[Symbol.for('fastify.display-name')], 'tower-sse')
  t.equal(towerSse, required)
})

t.test('stream routes are typed: the route option eventStream and reply.eventStream.subscribe()', async (t) => {
  const app = Fastify()
  await app.register(towerSse, { path: false })
  app.get('/typed', { eventStream: { initialEvent: async (client) => ({ data: client.id }) } }, (_request, reply) =>
    reply.eventStream.subscribe({ topics: ['a'], key: 'k', lastEventId: null, initialEvent: { data: 1 } }))
  // @ts-expect-error subscribe's options are checked
  app.get('/typo', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ topic: 'a' }))
  // @ts-expect-error the route option takes true or the route's own hooks, nothing else
  t.throws(() => app.get('/bad', { eventStream: 'yes' }, () => 'x'), { code: 'TOWER_SSE_OPTION' }, 'and so does the run time')
  // fastify.sse is declared on every instance, as Fastify plugins' decorators are: it exists at run
  // time in the registering context and below (docs/your-routes.md), so register at the root.
  const hub: SseHub = app.sse
  await app.ready()
  t.equal(hub.capacity, 200)
  t.equal(app.hasReplyDecorator('eventStream'), true)
  await app.close()
})
