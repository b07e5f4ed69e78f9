import t, { type Test } from 'tap'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import towerSse, { type TowerSseOptions } from '../lib'
import { withTestClocks } from '../lib/testing'
import { connect, waitFor } from './fixtures/sse-connection'
import { MemoryLog } from '../lib/resumable/memory-log'

async function answerApp (t: Test, options: TowerSseOptions = {}): Promise<{ app: FastifyInstance, port: number, produced: string[], gate: { open: () => void } }> {
  const produced: string[] = []
  let opened!: () => void
  const gateOpen = new Promise<void>((resolve) => { opened = resolve })
  const app = Fastify({ logger: false })
  await app.register(towerSse, withTestClocks({ path: false, heartbeatMs: 60_000, keyFn: (req) => String(req.headers['x-user'] ?? 'anon'), ...options }, { random: () => 0.5 }))
  app.post('/answer', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
    resumable: true,
    stream: ({ id }) => (async function * () {
      produced.push(id)
      for (let n = 0; n < 5; n++) yield { data: `token ${n}` }
      await gateOpen
      for (let n = 5; n < 10; n++) yield { data: `token ${n}` }
    })()
  }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { app, port: (app.server.address() as AddressInfo).port, produced, gate: { open: opened } }
}

t.test('memory: an answer resumed after a cut gets the rest once, in order, without running the producer again; then 204', async (t) => {
  const { port, produced, gate } = await answerApp(t)
  const first = await connect(port, '/answer', { 'x-user': 'alice' }, { method: 'POST' })
  await waitFor('5 tokens', () => first.events.length === 5)
  const last = first.events[4].id as string
  first.destroy()
  gate.open()
  const resumed = await connect(port, '/answer', { 'x-user': 'alice', 'last-event-id': last }, { method: 'POST' })
  await resumed.ended
  t.same(resumed.events.map((e) => e.event ?? e.data), ['token 5', 'token 6', 'token 7', 'token 8', 'token 9', 'end'])
  t.equal(produced.length, 1, 'the factory ran once')
  const after = await connect(port, '/answer', { 'x-user': 'alice', 'last-event-id': resumed.events.at(-1)?.id as string }, { method: 'POST' })
  await after.ended
  t.equal(after.status, 204)
  const stranger = await connect(port, '/answer', { 'x-user': 'mallory', 'last-event-id': last }, { method: 'POST' })
  await stranger.ended
  t.equal(stranger.status, 404)
})

// The log's `record` (tower-sse/mcp's append): no producer, no end, kept ttlMs past its last event.

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

t.test('memory log: record creates the log for its owner, appends in order, refuses another owner and a cancelled log', async (t) => {
  const log = new MemoryLog()
  t.teardown(() => log.close())
  const changed: string[] = []
  log.watch((id) => changed.push(id ?? '*'))
  t.equal(await log.record('m1', 'alice', 60_000, 'stream-1', [{ data: 'a' }]), 1)
  t.equal(await log.record('m1', 'alice', 60_000, 'ignored', [{ data: 'b' }, { data: 'c' }]), 3)
  const read = await log.read('m1', 0, 10)
  t.same(read?.meta, { owner: 'alice', running: true, last: 3, label: 'stream-1' }, 'created once, labelled by its first record')
  t.same(read?.entries.map((e) => e.kind === 'event' ? e.event.data : e.kind), ['a', 'b', 'c'])
  t.equal(await log.record('m1', 'mallory', 60_000, 'stream-1', [{ data: 'x' }]), null, 'another owner\'s log takes nothing')
  t.equal(await log.finish('m1', { kind: 'cancelled' }), true)
  t.equal(await log.record('m1', 'alice', 60_000, 'stream-1', [{ data: 'd' }]), null, 'a cancelled log takes nothing')
  t.same((await log.read('m1', 0, 10))?.entries.map((e) => e.kind), ['event', 'event', 'event', 'end'])
  await sleep(0)
  t.same(changed, ['m1', 'm1', 'm1'], 'each record and the end are told')
})

t.test('memory log: a recorded log expires ttlMs after its last record, not its first', async (t) => {
  const log = new MemoryLog()
  t.teardown(() => log.close())
  await log.record('m2', 'alice', 400, 's', [{ data: 'a' }])
  await sleep(250)
  await log.record('m2', 'alice', 400, 's', [{ data: 'b' }])
  // Timers fire in the order they are due: this one (500 ms after the first record) before the
  // log's (650 ms), whatever the machine's load.
  await sleep(250)
  t.equal((await log.read('m2', 0, 10))?.meta.last, 2, 'kept past ttlMs after its first record')
  await sleep(400)
  t.equal(await log.read('m2', 0, 10), null, 'gone ttlMs after its last')
})
