import t, { type Test } from 'tap'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyRequest } from 'fastify'
import towerSse, { ALL_TOPICS, type TowerSseOptions } from '../lib'
import { startApp, type TestApp } from './fixtures/app'
import { startRedis, type RedisServer } from '../benchmarks/lib/redis-server'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

// Topics are an access boundary: a stream gets a topic's events only when the server granted it
// that topic; untopiced events go to every stream; a firehose is the explicit ALL_TOPICS.

/** The app's own authentication, as a header here: `x-user: alice` is granted `user:alice`. */
const grantUser = (request: FastifyRequest): string[] | null => {
  const user = request.headers['x-user']
  return typeof user === 'string' ? [`user:${user}`] : null
}

const data = (c: SseConnection): string[] => c.events.map((e) => e.data)

async function publishMixed (app: TestApp['app']): Promise<string[]> {
  const ids: string[] = []
  for (const [text, topic] of [['for bob', 'user:bob'], ['for alice', 'user:alice'], ['for all', undefined], ['for bob again', 'user:bob']] as const) {
    ids.push((await app.sse.broadcast(text, topic === undefined ? {} : { topic })).id)
  }
  return ids
}

t.test('no grant, no topic: a stream without topics gets untopiced events only; ?topics= grants nothing by default', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000 })
  t.teardown(() => app.close())
  const plain = await connect(port)
  const asking = await connect(port, '/api/events?topics=user:bob')
  await waitFor('2 streams', () => app.sse.size === 2)
  t.equal((await app.sse.broadcast('for bob', { topic: 'user:bob' })).delivered, 0, 'no stream was granted user:bob')
  t.equal((await app.sse.broadcast('for all')).delivered, 2)
  await waitFor('the untopiced event', () => plain.events.length === 1 && asking.events.length === 1)
  t.same([data(plain), data(asking)], [['for all'], ['for all']])
  plain.destroy()
  asking.destroy()
})

t.test('topicsFromRequest returning null grants no topic; subscribe({ topics: ALL_TOPICS }) is the firehose', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { heartbeatMs: 60_000, topicsFromRequest: grantUser })
  app.get('/firehose', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ topics: ALL_TOPICS }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const port = (app.server.address() as AddressInfo).port
  const anonymous = await connect(port)
  const alice = await connect(port, '/api/events', { 'x-user': 'alice' })
  const firehose = await connect(port, '/firehose')
  await waitFor('3 streams', () => app.sse.size === 3)
  await publishMixed(app)
  await waitFor('deliveries', () => firehose.events.length === 4 && alice.events.length === 2 && anonymous.events.length === 1)
  t.same(data(anonymous), ['for all'])
  t.same(data(alice), ['for alice', 'for all'])
  t.same(data(firehose), ['for bob', 'for alice', 'for all', 'for bob again'])
  t.same([...app.sse].length, 3)
  for (const c of [anonymous, alice, firehose]) c.destroy()
})

t.test('replay (Last-Event-ID header or ?lastEventId=) and resync hold to the grants, on the memory bus', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000, topicsFromRequest: grantUser })
  t.teardown(() => app.close())
  const ids = await publishMixed(app)
  await grantedReplays(t, port, ids)
  // A bogus id (another epoch): the resync carries the newest id this stream is entitled to.
  const epoch = ids[0].split('-')[0]
  const bogus = `${epoch === 'x' ? 'y' : 'x'}-1`
  const anonymous = await connect(port, '/api/events', { 'last-event-id': bogus })
  const resync = await anonymous.nextEvent(0)
  t.same([resync.event, resync.id, JSON.parse(resync.data)], ['resync', ids[2], { reason: 'unknown', lastEventId: ids[2] }],
    'the newest untopiced id, not the newest id of all (which counts bob\'s traffic)')
  const alice = await connect(port, '/api/events', { 'last-event-id': bogus, 'x-user': 'alice' })
  t.equal((await alice.nextEvent(0)).id, ids[2])
  const carol = await connect(port, '/api/events?topics=user:carol', { 'last-event-id': bogus, 'x-user': 'carol' })
  await app.sse.broadcast('for bob, later', { topic: 'user:bob' })
  const none = await carol.nextEvent(0)
  t.same([none.event, none.id, JSON.parse(none.data).lastEventId], ['resync', ids[2], ids[2]])
  for (const c of [anonymous, alice, carol]) c.destroy()
})

/** Alice resumes from bob's first event, by header; an anonymous stream by query: only what each was granted. */
async function grantedReplays (t: Test, port: number, ids: string[]): Promise<void> {
  const alice = await connect(port, '/api/events', { 'last-event-id': ids[0], 'x-user': 'alice' })
  const anonymous = await connect(port, `/api/events?lastEventId=${ids[0]}`)
  await waitFor('the replays', () => alice.events.length === 2 && anonymous.events.length === 1)
  t.same(data(alice), ['for alice', 'for all'], 'alice: her own and the untopiced, never bob\'s')
  t.same(data(anonymous), ['for all'], '?lastEventId= with no grant: the untopiced only')
  alice.destroy()
  anonymous.destroy()
}

t.test('on the Redis bus: a replay read from Redis and a resync hold to the grants', async (t) => {
  const redis: RedisServer = await startRedis()
  t.teardown(() => redis.stop())
  const options: TowerSseOptions = { heartbeatMs: 60_000, topicsFromRequest: grantUser, redis: { url: redis.url, key: 'grants' } }
  const a = await startApp(options)
  t.teardown(() => a.app.close())
  const ids = await publishMixed(a.app)
  // B joins after the events: its ring does not hold them, so a resume there reads Redis.
  const b = await startApp(options)
  t.teardown(() => b.app.close())
  t.equal(b.app.sse.stats().bus.reads, 0)
  await grantedReplays(t, b.port, ids)
  t.ok(b.app.sse.stats().bus.reads > 0, 'read from Redis')
  // An id of an epoch Redis never had: a resync, whose id is the newest this stream may see.
  const stranger = await connect(b.port, '/api/events', { 'last-event-id': `zz-${Date.now()}-0`, 'x-user': 'alice' })
  await a.app.sse.broadcast('for bob, later', { topic: 'user:bob' })
  const resync = await stranger.nextEvent(0)
  t.same([resync.event, resync.id, JSON.parse(resync.data).lastEventId], ['resync', ids[2], ids[2]])
  stranger.destroy()
})
