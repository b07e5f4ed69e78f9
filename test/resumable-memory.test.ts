import t, { type Test } from 'tap'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import towerSse, { type TowerSseOptions } from '../lib'
import { withTestClocks } from '../lib/testing'
import { connect, waitFor } from './fixtures/sse-connection'

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
