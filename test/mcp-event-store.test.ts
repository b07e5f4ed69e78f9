import t, { type Test } from 'tap'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { EventStore } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js'
import towerSse from '../lib'
import { mcpEventStore, type McpMessage } from '../lib/mcp'
import { sharedLogOf, type SharedLog } from '../lib/resumable/shared-log'
import { IdSeal, ownerHash } from '../lib/resumable/resumable-id'
import { server } from './fixtures/bus-instances'
import { startMcpApp, HOLD_AT, TOTAL, type McpApp } from './fixtures/mcp-app'
import { waitFor } from './fixtures/sse-connection'

// tower-sse/mcp's EventStore with the real MCP SDK (server transport, client and its own
// reconnection): a tool call cut mid-way resumes on another instance over Redis, or on the same
// one over the memory log, every notification once and in order; ids are per owner.

/** The SDK client's fetch through a load balancer: each request goes to the instance `to()` names at the time. */
function balancer (to: () => McpApp): { fetch: (url: string | URL, init?: RequestInit) => Promise<Response>, seen: Array<{ port: number, method: string, lastEventId: string | null, status: number }> } {
  const seen: Array<{ port: number, method: string, lastEventId: string | null, status: number }> = []
  return {
    seen,
    fetch: async (input, init) => {
      const target = to()
      const url = new URL(String(input))
      url.port = String(target.port)
      const response = await fetch(url, init)
      seen.push({ port: target.port, method: init?.method ?? 'GET', lastEventId: new Headers(init?.headers).get('last-event-id'), status: response.status })
      return response
    }
  }
}

async function connectClient (t: Test, url: string, fetch: (url: string | URL, init?: RequestInit) => Promise<Response>, user: string): Promise<{ client: Client, transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name: 'test-client', version: '1.0.0' })
  client.onerror = () => {}
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch,
    requestInit: { headers: { 'x-user': user } },
    // The SDK's backoff, shortened: the cut is the test's, not a real outage.
    reconnectionOptions: { initialReconnectionDelay: 20, maxReconnectionDelay: 200, reconnectionDelayGrowFactor: 1.5, maxRetries: 20 }
  })
  await client.connect(transport)
  t.teardown(() => client.close())
  return { client, transport }
}

/** The tool called with progress: the notifications' `progress`, in the order the client got them, and every event id it saw. */
function callCount (client: Client): { progress: number[], tokens: string[], result: ReturnType<Client['callTool']> } {
  const progress: number[] = []
  const tokens: string[] = []
  const result = client.callTool({ name: 'count', arguments: {} }, undefined, {
    onprogress: (p) => progress.push(p.progress),
    onresumptiontoken: (token) => tokens.push(token),
    timeout: 10_000
  })
  return { progress, tokens, result }
}

const oneToTotal = Array.from({ length: TOTAL }, (_, i) => i + 1)

/** The JSON-RPC messages of an SSE body. */
function messagesOf (body: string): McpMessage[] {
  return body.split('\n').filter((line) => line.startsWith('data: ') && line.length > 'data: '.length).map((line) => JSON.parse(line.slice(6)) as McpMessage)
}

t.test('redis: a tool call cut on A resumes on B through the SDK client\'s own reconnect: every notification once, in order, then the result', async (t) => {
  const redis = await server(t)
  const a = await startMcpApp('A', { redis: { url: redis.url, key: 'mcp' } })
  t.teardown(() => a.app.close())
  const b = await startMcpApp('B', { redis: { url: redis.url, key: 'mcp' } })
  t.teardown(() => b.app.close())
  let target = a
  const lb = balancer(() => target)
  const { client, transport } = await connectClient(t, a.url, lb.fetch, 'alice')
  const call = callCount(client)
  await waitFor(`${HOLD_AT} notifications from A`, () => call.progress.length === HOLD_AT)
  // The cut: A's end of the tool call's stream, mid-way; from now on the balancer sends everything to B.
  target = b
  a.toolSockets[0].destroy()
  await waitFor('the client resumed on B (its GET with Last-Event-ID answered)', () => lb.seen.some((r) => r.port === b.port && r.lastEventId !== null && r.status === 200), 10_000)
  // Only now does A's tool go on: what it sends next reaches the client through B's following of the log.
  a.release()
  const result = await call.result
  t.same(call.progress, oneToTotal, 'every notification once, in order')
  t.same(result.content, [{ type: 'text', text: `counted to ${TOTAL} on A` }], 'the result, from A, through B')
  t.same([a.runs, b.runs], [['A'], []], 'the tool ran once, on A')
  t.same(lb.seen.filter((r) => r.lastEventId !== null).map((r) => [r.port, r.status]), [[b.port, 200]], 'one resumption, on B')
  await waitFor('B closed its replay transport after the response', () => b.resumes.open === 0)
  t.equal(b.resumes.served, 1)

  // Another owner presenting alice's event id (with her session's id, even) gets nothing of hers.
  const early = call.tokens[1]
  const ask = async (user: string): Promise<Response> => await fetch(b.url, {
    headers: { accept: 'text/event-stream', 'x-user': user, 'mcp-session-id': transport.sessionId as string, 'mcp-protocol-version': '2025-11-25', 'last-event-id': early }
  })
  const theirs = await ask('mallory')
  const theirBody = await theirs.text()
  t.equal(theirs.status, 400, 'the SDK answers an id the store does not know 400')
  t.same(messagesOf(theirBody).filter((m) => m.method === 'notifications/progress'), [], 'no notification of alice\'s')
  t.notMatch(theirBody, /counted/)
  const mine = await ask('alice')
  t.equal(mine.status, 200)
  const replayed = messagesOf(await mine.text())
  t.same(replayed.map((m) => m.method === undefined ? 'result' : (m.params as { progress: number }).progress), [...oneToTotal.slice(1), 'result'], 'the owner\'s replay of the same id: the rest, then the result, then the end')
  t.equal(b.resumes.open, 0)
})

t.test('memory: a tool call cut mid-way resumes on the same instance (the session\'s transport): every notification once, in order', async (t) => {
  const a = await startMcpApp('A')
  t.teardown(() => a.app.close())
  const lb = balancer(() => a)
  const { client } = await connectClient(t, a.url, lb.fetch, 'alice')
  const call = callCount(client)
  await waitFor(`${HOLD_AT} notifications`, () => call.progress.length === HOLD_AT)
  a.toolSockets[0].destroy()
  await waitFor('the client resumed (its GET with Last-Event-ID answered)', () => lb.seen.some((r) => r.lastEventId !== null && r.status === 200), 10_000)
  a.release()
  const result = await call.result
  t.same(call.progress, oneToTotal, 'every notification once, in order')
  t.same(result.content, [{ type: 'text', text: `counted to ${TOTAL} on A` }])
  t.same(a.runs, ['A'])
  t.equal(a.resumes.served, 0, 'the session\'s own transport served the resumption: the SDK sends the rest live')
})

async function memoryApp (t: Test): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  await app.ready()
  t.teardown(() => app.close())
  return app
}

const note = (n: number): JSONRPCMessage => ({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: n } })

/** What a replay sends, as [event id, message]. */
async function replay (store: EventStore, after: string): Promise<{ streamId: string, sent: Array<[string, JSONRPCMessage]> }> {
  const sent: Array<[string, JSONRPCMessage]> = []
  const streamId = await store.replayEventsAfter(after, { send: async (id, message) => { sent.push([id, message]) } })
  return { streamId, sent }
}

t.test('the store is the SDK\'s EventStore: sealed ids, a replay after any id in order once, the priming event never replayed', async (t) => {
  const app = await memoryApp(t)
  const store: EventStore = mcpEventStore(app, { owner: 'alice' })
  // The SDK's own priming event: an id, and no message.
  const priming = await store.storeEvent('stream-1', {} as JSONRPCMessage)
  const ids = [priming]
  for (let n = 1; n <= 3; n++) ids.push(await store.storeEvent('stream-1', note(n)))
  t.ok(ids.every((id) => /^r\.mcp-[A-Za-z0-9_-]{32}\.\d+\.[A-Za-z0-9_-]{16}$/.test(id)), ids.join(' '))
  t.same(await store.getStreamIdForEventId?.(ids[2]), 'stream-1', 'the SDK\'s own stream id back')
  const all = await replay(store, priming)
  t.equal(all.streamId, 'stream-1')
  t.same(all.sent, [[ids[1], note(1)], [ids[2], note(2)], [ids[3], note(3)]], 'after the priming event: each message with its own id')
  t.same((await replay(store, ids[2])).sent, [[ids[3], note(3)]])
  t.same((await replay(store, ids[3])).sent, [], 'nothing after the last')
  // An event without a message (as the priming event is) wherever it stands: its id, never sent.
  await store.storeEvent('stream-1', {} as JSONRPCMessage)
  const fifth = await store.storeEvent('stream-1', note(4))
  t.same((await replay(store, ids[3])).sent, [[fifth, note(4)]], 'no empty message sent to the client')
})

t.test('stream ids are the owner\'s: every session\'s standalone GET stream (one SDK id for all) is a log of its own; another owner\'s id finds nothing', async (t) => {
  const app = await memoryApp(t)
  const alice = mcpEventStore(app, { owner: 'alice\0session-1' })
  const bob = mcpEventStore(app, { owner: 'bob\0session-2' })
  const alice2 = mcpEventStore(app, { owner: 'alice\0session-3' })
  const a0 = await alice.storeEvent('_GET_stream', note(1))
  const b0 = await bob.storeEvent('_GET_stream', note(100))
  const c0 = await alice2.storeEvent('_GET_stream', note(1000))
  await alice.storeEvent('_GET_stream', note(2))
  await bob.storeEvent('_GET_stream', note(200))
  t.not(a0.split('.')[1], b0.split('.')[1], 'two owners, two logs')
  t.not(a0.split('.')[1], c0.split('.')[1], 'one user\'s two sessions, two logs')
  t.same((await replay(alice, a0)).sent.map(([, m]) => m), [note(2)])
  t.same((await replay(bob, b0)).sent.map(([, m]) => m), [note(200)])
  t.same((await replay(alice2, c0)).sent, [])
  // A forged seal on one's own log finds nothing either: the seal is checked, not only the owner.
  const forged = a0.replace(/\.[^.]+$/, '.AAAAAAAAAAAAAAAA')
  t.equal(await alice.getStreamIdForEventId(forged), undefined, 'a forged seal on alice\'s own id')
  // And the log's owner is checked too: an id naming alice's log under a seal valid for bob (as
  // only someone holding the secret could make) finds nothing.
  const shared = sharedLogOf(app.sse)
  const seal = new IdSeal(await (shared as SharedLog).log.secret())
  const logId = a0.split('.')[1]
  const sealedForBob = seal.eventId(logId, 1, seal.seal(logId, ownerHash('mcp\0bob\0session-2')))
  t.equal(await bob.getStreamIdForEventId(sealedForBob), undefined, 'alice\'s log under a seal of bob\'s')
  // Bob with alice's id: unknown to him, as a forged id or garbage is.
  for (const id of [a0, forged, 'garbage', 'r.nope.1.AAAAAAAAAAAAAAAA', '']) {
    t.equal(await bob.getStreamIdForEventId(id), undefined, `getStreamIdForEventId(${JSON.stringify(id)})`)
    const sent: unknown[] = []
    await t.rejects(bob.replayEventsAfter(id, { send: async (_id, m) => { sent.push(m) } }), /no stream of this owner/)
    t.same(sent, [], 'nothing sent')
  }
})

t.test('follow: after the replay, what the log receives, until the response; then onFollowEnd, once', async (t) => {
  const app = await memoryApp(t)
  const producer = mcpEventStore(app, { owner: 'alice' })
  const ends: string[] = []
  const follower = mcpEventStore(app, { owner: 'alice', follow: true, onFollowEnd: (id) => ends.push(id) })
  const first = await producer.storeEvent('req-1', {})
  await producer.storeEvent('req-1', note(1))
  const sent: McpMessage[] = []
  t.equal(await follower.replayEventsAfter(first, { send: async (_id, m) => { sent.push(m) } }), 'req-1')
  t.same(sent, [note(1)], 'the replay')
  await producer.storeEvent('req-1', note(2))
  await producer.storeEvent('req-1', note(3))
  await waitFor('the follower to send 2 and 3', () => sent.length === 3)
  const response = { jsonrpc: '2.0', id: 7, result: { content: [] } }
  await producer.storeEvent('req-1', response)
  await waitFor('the response', () => sent.length === 4)
  await waitFor('onFollowEnd', () => ends.length === 1)
  await producer.storeEvent('req-1', note(4))
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.same(sent, [note(1), note(2), note(3), response], 'nothing after the response')
  t.same(ends, ['req-1'])
  // Without follow, the replay is all: the SDK's own path sends the rest on the transport that runs the request.
  const plain: McpMessage[] = []
  await producer.replayEventsAfter(first, { send: async (_id, m) => { plain.push(m) } })
  t.same(plain, [note(1), note(2), note(3), response, note(4)])
})

t.test('follow: a response and what follows it read at once: sent up to the response, nothing after it', async (t) => {
  const app = await memoryApp(t)
  const producer = mcpEventStore(app, { owner: 'alice' })
  const ends: string[] = []
  const follower = mcpEventStore(app, { owner: 'alice', follow: true, onFollowEnd: (id) => ends.push(id) })
  const first = await producer.storeEvent('req-2', note(0))
  const sent: McpMessage[] = []
  await follower.replayEventsAfter(first, { send: async (_id, m) => { sent.push(m) } })
  const response = { jsonrpc: '2.0', id: 8, result: { content: [] } }
  // In one append, as a busy log hands a follower several events in one read.
  const shared = sharedLogOf(app.sse) as SharedLog
  await shared.log.record(first.split('.')[1], ownerHash('mcp\0alice'), 60_000, 'req-2', [note(1), response, note(2)].map((m) => ({ data: JSON.stringify(m) })))
  await waitFor('onFollowEnd', () => ends.length === 1)
  t.same(sent, [note(1), response], 'the response is the last message followed')
})

t.test('a cancelled stream takes no more events: storeEvent rejects rather than hand out an id of nothing stored', async (t) => {
  const app = await memoryApp(t)
  const store = mcpEventStore(app, { owner: 'alice' })
  const first = await store.storeEvent('s', note(1))
  t.equal(await app.sse.cancel(first.split('.')[1]), true)
  await t.rejects(store.storeEvent('s', note(2)), /takes no more events \(cancelled\)/)
  t.same((await replay(store, first)).sent, [], 'nothing stored after the cancel')
})

t.test('follow: close() stops a follower (the transport it served closed), and onFollowEnd is told', async (t) => {
  const app = await memoryApp(t)
  const producer = mcpEventStore(app, { owner: 'alice' })
  const ends: string[] = []
  const follower = mcpEventStore(app, { owner: 'alice', follow: true, onFollowEnd: (id) => ends.push(id) })
  const first = await producer.storeEvent('_GET_stream', note(0))
  const sent: McpMessage[] = []
  await follower.replayEventsAfter(first, { send: async (_id, m) => { sent.push(m) } })
  await producer.storeEvent('_GET_stream', note(1))
  await waitFor('one followed', () => sent.length === 1)
  follower.close()
  await waitFor('onFollowEnd', () => ends.length === 1)
  await producer.storeEvent('_GET_stream', note(2))
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.same(sent, [note(1)], 'nothing after close()')
})

t.test('follow: the plugin closing stops every follower, each told through onFollowEnd', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  await app.ready()
  const producer = mcpEventStore(app, { owner: 'alice' })
  const ends: string[] = []
  const follower = mcpEventStore(app, { owner: 'alice', follow: true, onFollowEnd: (id) => ends.push(id) })
  const first = await producer.storeEvent('_GET_stream', note(0))
  await follower.replayEventsAfter(first, { send: async () => {} })
  await new Promise((resolve) => setImmediate(resolve))
  t.same(ends, [], 'following')
  // Told in preClose, before the server stops: by the time close() resolves.
  await app.close()
  t.same(ends, ['_GET_stream'], 'told once, by the time close() resolves')
})

t.test('an MCP event id is not a stream route\'s: the same owner as the route\'s key gets 404 there', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000, keyFn: (request) => String(request.headers['x-user']) })
  app.get('/answer', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({ resumable: true, stream: () => (async function * () { yield { data: 'x' } })() }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const id = await mcpEventStore(app, { owner: 'alice' }).storeEvent('s', note(1))
  const response = await fetch(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/answer`, { headers: { 'x-user': 'alice', 'last-event-id': id } })
  const status = response.status
  if (status !== 404) await response.body?.cancel()
  t.equal(status, 404)
  if (status === 404) t.match(await response.json(), { code: 'TOWER_SSE_STREAM_NOT_FOUND' })
})

t.test('ttlMs: a stream is kept ttlMs after its last event, then its ids find nothing', async (t) => {
  const app = await memoryApp(t)
  const store = mcpEventStore(app, { owner: 'alice', ttlMs: 200 })
  const id = await store.storeEvent('s', note(1))
  t.equal(await store.getStreamIdForEventId(id), 's')
  let gone = false
  const deadline = Date.now() + 10_000
  while (!gone && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    gone = await store.getStreamIdForEventId(id) === undefined
  }
  t.ok(gone, 'expired')
  await t.rejects(store.replayEventsAfter(id, { send: async () => {} }), /no stream of this owner/)
})

t.test('options are checked; an app without tower-sse has no store', async (t) => {
  const app = await memoryApp(t)
  t.throws(() => mcpEventStore(app, {} as never), { code: 'TOWER_SSE_OPTION', message: /mcpEventStore\.owner/ })
  t.throws(() => mcpEventStore(app, { owner: '' }), { code: 'TOWER_SSE_OPTION' })
  t.throws(() => mcpEventStore(app, { owner: 'a', ttlMs: 0 }), { code: 'TOWER_SSE_OPTION', message: /mcpEventStore\.ttlMs/ })
  t.throws(() => mcpEventStore(app, { owner: 'a', tttlMs: 5 } as never), { code: 'TOWER_SSE_OPTION', message: /did you mean "ttlMs"/ })
  t.throws(() => mcpEventStore(app, { owner: 'a', follow: 'yes' } as never), { code: 'TOWER_SSE_OPTION', message: /mcpEventStore\.follow/ })
  const bare = Fastify({ logger: false })
  t.teardown(() => bare.close())
  t.throws(() => mcpEventStore(bare, { owner: 'a' }), { code: 'TOWER_SSE_NOT_REGISTERED' })
})
