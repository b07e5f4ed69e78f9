import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { PublishBatch } from '../lib/bus/redis/publish-batch'
import { RedisBus } from '../lib/bus/redis/redis-bus'
import type { BusEvent } from '../lib/bus/bus'
import { DEFAULTS } from '../lib/options'
import { startRedis, type RedisServer } from '../benchmarks/lib/redis-server'
import { waitFor } from './fixtures/sse-connection'

// The publishes of one turn go to Redis in one pipeline, on a real redis-server: the calls run in
// the order made, each caller gets its own call's outcome, and a call Redis refuses fails alone.

let redis: RedisServer
let keys = 0
t.before(async () => { redis = await startRedis() })
t.teardown(() => redis.stop())

/** A real ioredis client with a script that appends ARGV[1] to a list, or refuses 'fail'; pipelines it opens are counted. */
function client (t: Test): { connection: Redis, pipelines: () => number } {
  const connection = new Redis(redis.url, { lazyConnect: false, maxRetriesPerRequest: 0 })
  connection.defineCommand('appendOrRefuse', {
    numberOfKeys: 1,
    lua: "if ARGV[1] == 'fail' then return redis.error_reply('refused ' .. ARGV[1]) end return redis.call('RPUSH', KEYS[1], ARGV[1])"
  })
  let pipelines = 0
  const pipeline = connection.pipeline.bind(connection)
  connection.pipeline = ((...args: Parameters<Redis['pipeline']>) => {
    pipelines++
    return pipeline(...args)
  }) as Redis['pipeline']
  t.teardown(() => connection.disconnect())
  return { connection, pipelines: () => pipelines }
}

const settled = (calls: Array<Promise<unknown>>): Promise<Array<{ ok: unknown } | { error: string }>> =>
  Promise.all(calls.map((call) => call.then((ok) => ({ ok }), (error: Error) => ({ error: `${error.name}: ${error.message}` }))))

t.test('one turn\'s calls go in one pipeline, run in order; the one Redis refuses fails alone, its neighbours stand', async (t) => {
  const { connection, pipelines } = client(t)
  await connection.ping()
  const batch = new PublishBatch(connection, 'appendOrRefuse', 100)
  const list = `list${++keys}`
  const values = ['a', 'b', 'fail', 'c', 'd']
  const outcomes = await settled(values.map((value) => batch.call([list, value])))
  t.same(outcomes, [{ ok: 1 }, { ok: 2 }, { error: 'ReplyError: refused fail' }, { ok: 3 }, { ok: 4 }], 'each caller its own reply, in call order')
  t.same(await connection.lrange(list, 0, -1), ['a', 'b', 'c', 'd'], 'Redis ran them in the order they were made')
  t.equal(pipelines(), 1, 'one pipeline for the turn')
})

t.test('a turn with more calls than maxBatch goes in pipelines of maxBatch, in order; maxBatch 1 sends each at once', async (t) => {
  const { connection, pipelines } = client(t)
  await connection.ping()
  const list = `list${++keys}`
  const batch = new PublishBatch(connection, 'appendOrRefuse', 4)
  const values = Array.from({ length: 10 }, (_, i) => String(i))
  const outcomes = await settled(values.map((value) => batch.call([list, value])))
  t.same(outcomes, values.map((_, i) => ({ ok: i + 1 })))
  t.same(await connection.lrange(list, 0, -1), values)
  t.equal(pipelines(), 3, '4 + 4 + 2')

  const single = new PublishBatch(connection, 'appendOrRefuse', 1)
  const alone = `list${++keys}`
  t.same(await settled(['x', 'fail', 'y'].map((value) => single.call([alone, value]))), [{ ok: 1 }, { error: 'ReplyError: refused fail' }, { ok: 2 }])
  t.equal(pipelines(), 3, 'no pipeline for maxBatch 1')
})

t.test('a pipeline whose connection is gone answers every caller with the error, none left waiting', async (t) => {
  const { connection } = client(t)
  await connection.ping()
  const batch = new PublishBatch(connection, 'appendOrRefuse', 100)
  const list = `list${++keys}`
  const calls = ['a', 'b', 'c'].map((value) => batch.call([list, value]))
  connection.disconnect()
  const outcomes = await settled(calls)
  t.equal(outcomes.length, 3)
  t.ok(outcomes.every((outcome) => 'error' in outcome && !outcome.error.startsWith('ReplyError')), `each caller rejected, not by Redis: ${JSON.stringify(outcomes)}`)
})

t.test('the Redis bus: 30 publishes of one turn are one pipeline, delivered in call order, each caller answered with its own id; a repeated idempotency key in the same turn lands once', async (t) => {
  const { publishTimeoutMs, maxPendingPublishes, maxPublishBatch, idempotencyWindowMs } = DEFAULTS
  const { connection, pipelines } = client(t)
  const bus = new RedisBus({ redis: connection, key: `bus${++keys}`, historyMaxEvents: 100, publishTimeoutMs, maxPendingPublishes, maxPublishBatch, idempotencyWindowMs, random: Math.random, log: { warn: () => {}, info: () => {} } })
  const delivered: BusEvent[] = []
  await bus.subscribe((event) => { delivered.push(event); return 0 }, () => {})
  t.teardown(() => bus.close())
  const before = pipelines()
  const messages = Array.from({ length: 30 }, (_, n) => ({ data: JSON.stringify({ n }), idempotencyKey: n === 20 ? 'again' : n === 25 ? 'again' : undefined }))
  const results = await Promise.all(messages.map((message) => bus.publish(message)))
  t.equal(pipelines() - before, 1, 'one pipeline for the 30 publishes')
  await waitFor('29 events delivered', () => delivered.length === 29)
  const landed = messages.map((_, n) => n).filter((n) => n !== 25)
  t.same(delivered.map((event) => JSON.parse(event.data).n), landed, 'in the order published, the repeated key once')
  t.same(results.filter((_, n) => n !== 25).map((result) => result.id), delivered.map((event) => event.id), 'each caller its own event\'s id')
  t.equal(results[25].id, results[20].id, 'the repeat got the first publish\'s id')
  t.equal(results[25].delivered, 0, 'and delivered nothing new')
})
