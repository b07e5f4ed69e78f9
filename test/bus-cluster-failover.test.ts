import t from 'tap'
import { RedisCluster } from '../benchmarks/lib/redis-cluster'
import { waitFor as pollUntil } from '../benchmarks/lib/wait-for'
import { instance, open, received } from './fixtures/bus-instances'
import { epochOf, orderFaults, publish } from './fixtures/publishes'
import { waitFor } from './fixtures/sse-connection'

// The Redis bus on a Cluster whose masters have replicas (issue 31, item 8): the master serving the
// bus's slot is killed (SIGKILL), its replica takes the slot over, and the bus follows it. A
// promoted replica may lack the master's last writes, so continuity cannot be proven: a new epoch
// and a resync, never an acknowledged event lost silently.

/**
 * The acknowledged events a stream misses with no resync after the last event before them: lost
 * silently. One publisher, so its events arrive in the order of their numbers.
 */
function silentlyLost (got: Array<number | 'resync'>, acked: number[]): number[] {
  return acked.filter((n) => {
    if (got.includes(n)) return false
    // Past the last event received before n: a resync there covers it.
    let before = got.length - 1
    while (before >= 0 && (got[before] === 'resync' || (got[before] as number) > n)) before--
    return !got.slice(before + 1).includes('resync')
  })
}

t.test('the master of the bus\'s slot killed: its replica promoted, publishing again, every acknowledged event delivered in order or covered by a resync', async (t) => {
  const cluster = await RedisCluster.start({ replicas: 1, nodeTimeoutMs: 1000 })
  t.teardown(() => cluster.stop())
  const key = 'failover'
  const a = await instance(t, cluster.url, key)
  const b = await instance(t, cluster.url, key)
  const onA = await open(t, a)
  const onB = await open(t, b)
  await waitFor('both streams to open', () => a.app.sse.size === 1 && b.app.sse.size === 1)
  const results: Array<Awaited<ReturnType<typeof publish>>> = []
  let n = 0
  for (let i = 0; i < 5; i++) results.push(await publish(a, n++))
  t.same(results.filter((r) => r.refused !== undefined), [], 'every publish acknowledged before the kill')
  const epochBefore = epochOf(results[0].id)
  await waitFor('both streams to see them', () => received(onA).length === 5 && received(onB).length === 5)

  const slot = await cluster.slotOf(`{${key}}:stream`)
  const master = await cluster.ownerOf(slot)
  const survivor = cluster.ports.find((port) => port !== master) as number
  await cluster.kill(master)
  const killedAt = Date.now()
  // Publishing on, 100 ms apart, until ten in a row are acknowledged in the new epoch (bounded).
  let inARow = 0
  for (let i = 0; i < 150 && inARow < 10; i++) {
    const result = await publish(a, n++)
    results.push(result)
    inARow = result.id !== undefined && epochOf(result.id) !== epochBefore ? inARow + 1 : 0
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.equal(inARow, 10, `publishing again after the failover (ten in a row by ${Date.now() - killedAt} ms; ${results.filter((r) => r.refused !== undefined).length} refused meanwhile)`)
  const promoted = await cluster.ownerOf(slot, survivor)
  t.not(promoted, master, 'the slot is served by the promoted replica')
  t.not(epochOf(results.at(-1)?.id), epochBefore, 'a new epoch: a promoted replica is not provably lossless')

  const acked = results.filter((r) => r.id !== undefined).map((r) => r.n)
  const last = acked.at(-1) as number
  for (const [name, stream] of [['A', onA], ['B', onB]] as const) {
    await waitFor(`${name} to reach ${last}`, () => received(stream).includes(last), 15_000)
    const got = received(stream)
    t.same(orderFaults(got, () => 'A'), [], `${name}: in order, none twice`)
    t.same(silentlyLost(got, acked), [], `${name}: no acknowledged event missing without a resync after it`)
    t.ok(got.filter((m) => m === 'resync').length <= 1, `${name}: at most one resync (${got.filter((m) => m === 'resync').length})`)
    t.notOk(stream.isEnded(), `${name}: the stream stayed open`)
  }
  await pollUntil('both buses up', async () => a.app.sse.stats().bus.state === 'up' && b.app.sse.stats().bus.state === 'up', 10_000, 100)
})
