import t, { type Test } from 'tap'
import { Cluster } from 'ioredis'
import { RedisCluster } from '../benchmarks/lib/redis-cluster'
import { waitFor as pollUntil } from '../benchmarks/lib/wait-for'
import { instance, open, received } from './fixtures/bus-instances'
import { startApp, type TestApp } from './fixtures/app'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'
import { notify, request } from './fixtures/tower'
import { epochOf, orderFaults, publish } from './fixtures/publishes'
import { runCli } from './fixtures/tower-cli'
import type { TowerStats } from '../lib/tower/stats-route'

// The Redis bus on a real 3-node Redis Cluster (issue 31, item 8): every key of the bus in one
// hash slot, a Cluster client from redis+cluster://, and the slot moved while publishing.

let cluster: RedisCluster

t.before(async () => { cluster = await RedisCluster.start() })
t.teardown(() => cluster.stop())

/** Two instances on `key`, a stream open on each. */
async function pair (t: Test, key: string): Promise<{ a: TestApp, b: TestApp, onA: SseConnection, onB: SseConnection }> {
  const a = await instance(t, cluster.url, key)
  const b = await instance(t, cluster.url, key)
  const onA = await open(t, a)
  const onB = await open(t, b)
  await waitFor('both streams to open', () => a.app.sse.size === 1 && b.app.sse.size === 1)
  return { a, b, onA, onB }
}

t.test('on a 3-node cluster: both instances start (no CROSSSLOT) and deliver each other\'s events in order', async (t) => {
  const { a, b, onA, onB } = await pair(t, 'c1')
  const results = []
  for (let n = 0; n < 20; n++) results.push(await publish(n % 2 === 0 ? a : b, n))
  t.same(results.filter((r) => r.refused !== undefined), [], 'every publish acknowledged')
  await waitFor('20 events on each stream', () => onA.events.length === 20 && onB.events.length === 20, 15_000)
  const all = Array.from({ length: 20 }, (_, n) => n)
  t.same(received(onA), all)
  t.same(received(onB), all)
  t.equal(a.app.sse.stats().bus.state, 'up')
  t.equal(b.app.sse.stats().bus.state, 'up')
})

t.test('an ioredis Cluster passed in: the bus runs on it and a duplicate, and never closes it', async (t) => {
  const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })))
  t.teardown(() => client.disconnect())
  const a = await startApp({ heartbeatMs: 60_000, redis: { client, key: 'c0' } })
  const b = await instance(t, cluster.url, 'c0')
  const onB = await open(t, b)
  await waitFor('the stream to open', () => b.app.sse.size === 1)
  t.match(await publish(a, 1), { id: String })
  await waitFor('the event on B', () => onB.events.length === 1, 15_000)
  await a.app.close()
  t.equal(client.status, 'ready', 'the app\'s Cluster is still open')
  t.equal(await client.ping(), 'PONG')
})

t.test('Tower on a redis+cluster:// URL: notify reaches the stream, and the instance board (several keys at once) works', async (t) => {
  const cli = runCli(['--redis', cluster.url, '--redis-key', 'tower-c'], { PORT: '0' }, { built: true })
  t.teardown(() => cli.child.kill('SIGKILL'))
  const line = await cli.line(/tower: listening on/)
  const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(line)?.[1])
  t.match(line, `bus ${cluster.url}`, 'the start-up line names the cluster')
  const stream = await connect(port)
  t.teardown(() => stream.destroy())
  await stream.nextEvent(0)
  t.equal((await notify(port, { type: 'ci', title: 'on the cluster', body: '' })).status, 200)
  await waitFor('the event on the stream', () => stream.events.length === 2, 15_000)
  let stats: TowerStats | undefined
  await pollUntil('the instance board to list this instance', async () => {
    stats = JSON.parse((await request(port, 'GET', '/api/events/stats')).body) as TowerStats
    return stats.instances?.length === 1
  }, 15_000)
  t.same([stats?.bus.state, stats?.instances?.map((i) => i.bus)], ['up', ['up']])
  // The board lists this instance even when Redis cannot be read: its report must be in Redis.
  const board = '{tower-c}:instances'
  const owner = await cluster.ownerOf(await cluster.slotOf(board))
  await pollUntil('the report in Redis', async () => Number(await cluster.command(owner, 'SCARD', board)) === 1, 15_000)
})

t.test('the bus\'s slot migrated while both instances publish: no refusal left after it, every acknowledged event delivered once in order, the new node\'s facts learnt, the bus up', async (t) => {
  const key = 'c2'
  const { a, b, onA, onB } = await pair(t, key)
  const slot = await cluster.slotOf(`{${key}}:stream`)
  const from = await cluster.ownerOf(slot)
  const to = cluster.ports.find((port) => port !== from) as number
  const results: Array<{ n: number, id?: string, refused?: string }> = []
  const fromB = new Set<number>()
  const publishB = (m: number): ReturnType<typeof publish> => {
    fromB.add(m)
    return publish(b, m)
  }
  let n = 0
  results.push(await publish(a, n++))
  const epochBefore = epochOf(results[0].id)
  // Two publishes (one per instance) before each key moves and once the keys are all on the target.
  await cluster.migrateSlot(slot, to, async () => {
    results.push(...await Promise.all([publish(a, n++), publishB(n++)]))
  })
  t.equal(await cluster.ownerOf(slot), to, 'the slot is on the other node')
  const during = results.length
  // After the migration: every publish is answered (MOVED followed, never a 503 MOVED).
  for (let i = 0; i < 20; i++) results.push(await (i % 2 === 0 ? publish(a, n++) : publishB(n++)))
  t.same(results.slice(during).filter((r) => r.refused !== undefined), [], 'no publish refused after the migration')
  // The slot's new node has another run_id and no AOF: the bus vouches with its facts, so a new epoch starts.
  for (let i = 0; i < 100 && epochOf(results.at(-1)?.id) === epochBefore; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    results.push(await publish(a, n++))
  }
  t.not(epochOf(results.at(-1)?.id), epochBefore, 'the epoch is the new node\'s (its run_id was learnt without a reconnect)')
  t.same(results.slice(during).filter((r) => r.refused !== undefined), [], 'still no publish refused')
  const acked = results.filter((r) => r.id !== undefined).map((r) => r.n)
  const last = acked.at(-1) as number
  t.ok(results.slice(0, during).filter((r) => r.id !== undefined).length >= during / 2, `most publishes during the migration acknowledged (${results.slice(0, during).map((r) => r.refused ?? 'ok').join(', ')})`)
  for (const [name, stream] of [['A', onA], ['B', onB]] as const) {
    await waitFor(`${name} to reach ${last}`, () => received(stream).includes(last), 15_000)
    const got = received(stream)
    t.same(orderFaults(got, (m) => fromB.has(m) ? 'B' : 'A'), [], `${name}: each publisher's events in its order, none twice`)
    if (got.includes('resync')) t.pass(`${name}: a resync said where continuity could not be proven`)
    else t.same(acked.filter((m) => !got.includes(m)), [], `${name}: every acknowledged event delivered`)
  }
  t.same(received(onA), received(onB), 'both streams got the same events in the same order')
  await waitFor('both buses up', () => a.app.sse.stats().bus.state === 'up' && b.app.sse.stats().bus.state === 'up', 10_000)
  t.equal(a.app.sse.stats().bus.discontinuities + b.app.sse.stats().bus.discontinuities, 0, 'the new epoch\'s marker proved nothing was lost')
})

t.test('a migration mid-publish with idempotency keys: each key\'s event lands once, a refused one retried after it', async (t) => {
  const key = 'c3'
  const { a, b, onA } = await pair(t, key)
  const slot = await cluster.slotOf(`{${key}}:stream`)
  const from = await cluster.ownerOf(slot)
  const to = cluster.ports.find((port) => port !== from) as number
  // The same keys from both instances, mid-migration: each is published twice.
  const sent: Array<{ n: number, key: string }> = []
  await cluster.migrateSlot(slot, to, async () => {
    const n = sent.length
    sent.push({ n, key: `job-${n}` })
    await Promise.all([publish(a, n, `job-${n}`), publish(b, n, `job-${n}`)])
  })
  // Whatever was refused (or not) is sent again now: a retry of a key that landed is a duplicate.
  for (const { n, key } of sent) {
    const again = await publish(a, n, key)
    t.equal(again.refused, undefined, `job-${n} answered after the migration`)
  }
  await waitFor('every job on A', () => sent.every(({ n }) => received(onA).includes(n)), 15_000)
  const end = await publish(a, 1_000)
  await waitFor('the closing event on A', () => received(onA).includes(1_000), 15_000)
  t.equal(end.refused, undefined)
  t.same(received(onA).filter((m) => m !== 'resync' && m !== 1_000), sent.map(({ n }) => n), 'each key once, in order')
})
