import { withTestClocks } from '../lib/testing'
import t from 'tap'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import towerSse, { ALL_TOPICS } from '../lib'
import { startApp } from './fixtures/app'
import { connect, waitFor } from './fixtures/sse-connection'

// fastify.sse addresses streams: one by id, all of one key (every tab of a user); it closes them
// with a counted reason and a jittered retry:, and a subscribe()'s expiresAt closes one the same way.

const byUser = { keyFn: (request: { headers: Record<string, unknown> }) => `user:${String(request.headers['x-user'])}` }

t.test('send to one stream or every tab of a user; close them as logout or revoked, counted, each with a retry:', async (t) => {
  const { app, port } = await startApp(withTestClocks({ heartbeatMs: 60_000, maxClientsPerKey: 0, retryMs: 3000, ...byUser }, { random: () => 0.25 }))
  t.teardown(() => app.close())
  const [tab1, tab2, bob] = [await connect(port, '/api/events', { 'x-user': 'alice' }), await connect(port, '/api/events', { 'x-user': 'alice' }), await connect(port, '/api/events', { 'x-user': 'bob' })]
  await waitFor('3 streams', () => app.sse.size === 3)
  const info = [...app.sse]
  t.same(info.map((c) => [c.key, c.topics]), [['user:alice', []], ['user:alice', []], ['user:bob', []]], 'iteration shows key and topics')
  t.equal(app.sse.send({ key: 'user:alice' }, { n: 1 }, { event: 'note' }), 2, 'both of alice\'s tabs')
  t.equal(app.sse.send({ id: info[2].id }, 'just bob'), 1)
  t.equal(app.sse.send({ id: 'nobody' }, 'x'), 0)
  t.equal(app.sse.send({ key: 'user:carol' }, 'x'), 0)
  await waitFor('deliveries', () => tab1.events.length === 1 && tab2.events.length === 1 && bob.events.length === 1)
  t.same([tab1.events[0].event, tab1.events[0].data, tab1.events[0].id], ['note', '{"n":1}', undefined], 'no id: not replayable')
  t.equal(bob.events[0].data, 'just bob')
  t.equal(app.sse.close({ key: 'user:alice' }, 'logout'), 2)
  await Promise.all([tab1.ended, tab2.ended])
  t.same([tab1.retries, tab2.retries], [[2700, 2700], [2700, 2700]], 'the opening retry: and a jittered one before the end (3000 ± 20% at random 0.25)')
  t.equal(app.sse.close({ id: info[2].id }, 'revoked'), 1)
  await bob.ended
  t.match(app.sse.stats(), { logout: 2, revoked: 1, current: 0 })
  t.throws(() => app.sse.close({ key: 'user:bob' }, 'expired' as never), { code: 'TOWER_SSE_BAD_CLOSE_REASON', message: /revoked or logout, got expired/ })
  t.throws(() => app.sse.close(null as never, 'logout'), { code: 'TOWER_SSE_BAD_ADDRESS', message: /got null/ })
  t.throws(() => app.sse.send({ id: 7 } as never, 'x'), { code: 'TOWER_SSE_BAD_ADDRESS', message: /got \{"id":7\}/ })
  t.throws(() => app.sse.send({ key: 'user:bob' }, 10n), { code: 'TOWER_SSE_UNENCODABLE_DATA', message: /BigInt/ })
})

t.test('send counts the streams that took the event: one it would take past its byte budget is dropped, not counted', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000, maxClientsPerKey: 0, maxBufferedBytes: 4096, ...byUser })
  t.teardown(() => app.close())
  const [tab1, tab2] = [await connect(port, '/api/events', { 'x-user': 'alice' }), await connect(port, '/api/events', { 'x-user': 'alice' })]
  await waitFor('2 streams', () => app.sse.size === 2)
  const [first] = [...app.sse]
  // In one turn: the first tab still holds the first event, unsent, when the second comes (3 KB each, a 4 KB budget).
  t.equal(app.sse.send({ id: first.id }, 'a'.repeat(3000)), 1)
  t.equal(app.sse.send({ key: 'user:alice' }, 'b'.repeat(3000)), 1, 'the other tab took it; the first would pass its budget: dropped')
  await tab1.ended
  await waitFor('the second tab\'s event', () => tab2.events.length === 1)
  t.equal(tab2.events[0].data, 'b'.repeat(3000))
  t.match(app.sse.stats(), { dropped: 1, current: 1 })
  tab2.destroy()
})

t.test('subscribe({ expiresAt }) closes the stream as credentialsExpired when the token runs out, with a retry:; max age wins when it comes first', async (t) => {
  // The injected clock: a token issued now that runs out 30 ms later, by that clock.
  const clock = 1_000_000
  const app = Fastify({ logger: false })
  await app.register(towerSse, withTestClocks({ heartbeatMs: 60_000, maxAgeMs: 60_000, path: false }, { now: () => clock, random: () => 0.5 }))
  app.get('/token', { eventStream: true }, (request, reply) =>
    reply.eventStream.subscribe({ expiresAt: clock + Number(request.headers['x-exp-in']), topics: ALL_TOPICS }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const realPort = (app.server.address() as AddressInfo).port
  const soon = await connect(realPort, '/token', { 'x-exp-in': '30' })
  const later = await connect(realPort, '/token', { 'x-exp-in': '3600000' })
  await soon.ended
  t.equal(soon.retries.length, 2, 'the opening retry: and the closing one')
  await waitFor('counted', () => app.sse.stats().credentialsExpired === 1)
  t.equal(app.sse.size, 1)
  const [left] = [...app.sse]
  t.ok(left.expiresAt !== null && left.expiresAt - left.connectedAt === 60_000, 'max age comes first for the long token')
  later.destroy()
})
