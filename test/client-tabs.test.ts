/**
 * Tab sharing over Node's own BroadcastChannel: the clients of this process play the tabs of one
 * origin (globalThis.location is set as a page's would be). Node has no Web Locks, so this is the
 * heartbeat-lease election; the Web Locks one runs in Chromium (test/dashboard-tabs.test.ts).
 */
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import towerSse from '../lib'
import { TowerSseClient, TowerSseErrorEvent } from '../lib/client'
import { TAB_LEASE, TabShare, type TabClock, type TabRole } from '../lib/client/tabs'
import type { StreamWire } from '../lib/client/wire'
import { waitFor } from './fixtures/sse-connection'
import type { TestApp } from './fixtures/app'
import { notify, startTower } from './fixtures/tower'

const WAIT_MS = 10_000

interface Tab { client: TowerSseClient, ids: string[] }

/** A tab's client, with the notification ids it delivered, in order. */
function openTab (url: string, options = {}): Tab {
  const client = new TowerSseClient(url, options)
  const tab: Tab = { client, ids: [] }
  client.addEventListener('message', (event) => {
    const message = JSON.parse(event.data) as { type: string, id: string }
    if (message.type !== 'connected') tab.ids.push(message.id)
  })
  return tab
}

/** Tower on loopback, and this process playing one of its pages (globalThis.location) until the test ends. */
async function startTowerPage (t: Test): Promise<{ tower: TestApp, base: string }> {
  const tower = await startTower({ heartbeatMs: 60_000 })
  const base = `http://127.0.0.1:${tower.port}`
  Object.assign(globalThis, { location: { href: `${base}/`, origin: base } })
  t.teardown(() => { Reflect.deleteProperty(globalThis, 'location') })
  return { tower, base }
}

const leaders = (tabs: Tab[]): Tab[] => tabs.filter((tab) => tab.client.tabRole === 'leader')

t.test('tabs of one origin share one stream; a leader that leaves hands over, nothing lost or repeated', async (t) => {
  const { tower, base } = await startTowerPage(t)
  t.teardown(() => tower.app.close())

  let tabs = [0, 1, 2].map(() => openTab('/api/events'))
  t.teardown(() => { for (const tab of tabs) tab.client.close() })
  await waitFor('one leader, every tab open', () => leaders(tabs).length === 1 && tabs.every((tab) => tab.client.readyState === TowerSseClient.OPEN), WAIT_MS)
  t.equal(tower.app.sse.size, 1, 'three tabs, one stream')
  t.same(tabs.map((tab) => tab.client.tabRole).sort(), ['follower', 'follower', 'leader'])
  t.equal(tabs[0].client.url, `${base}/api/events`, 'a relative URL resolves against the page')

  const expected: string[] = []
  const post = async (title: string): Promise<void> => {
    const response = await notify(tower.port, { type: 'build', title, body: title })
    expected.push((JSON.parse(response.body) as { id: string }).id)
  }
  await post('one')
  await waitFor('every tab to get it', () => tabs.every((tab) => tab.ids.length === 1), WAIT_MS)
  const states = tabs.map((tab) => [tab.client.readyState, tab.client.state.kind, tab.client.lastEventId])
  t.same(states, tabs.map(() => [TowerSseClient.OPEN, 'open', expected[0]]), 'every tab: the same readyState, state and lastEventId')

  for (const round of [1, 2]) {
    const [leader] = leaders(tabs)
    tabs = tabs.filter((tab) => tab !== leader)
    const handOver = waitFor('a new leader, open', () => leaders(tabs).length === 1 && leaders(tabs)[0].client.readyState === TowerSseClient.OPEN, WAIT_MS)
    leader.client.close()
    t.equal(leader.client.readyState, TowerSseClient.CLOSED, 'the leaving tab is closed')
    await post(`round ${round}, during the hand-over`)
    await handOver
    await post(`round ${round}, after`)
    await waitFor('every tab to catch up', () => tabs.every((tab) => tab.ids.length === expected.length), WAIT_MS)
    t.same(tabs.map((tab) => tab.ids), tabs.map(() => expected), `round ${round}: every remaining tab got every notification once, in order`)
    t.equal(tower.app.sse.size, 1, `round ${round}: one stream`)
  }
  t.same(tabs.map((tab) => tab.client.lastEventId), tabs.map(() => expected.at(-1)), 'the last tab standing has the same lastEventId')
})

t.test('different URLs or headers, an opt-out or another origin: no sharing', async (t) => {
  const { tower } = await startTowerPage(t)
  const tabs = [
    openTab('/api/events'),
    openTab('/api/events?topics=build'),
    openTab('/api/events', { headers: { 'x-tab': 'b' } }),
    openTab('/api/events', { shareAcrossTabs: false }),
    openTab(`http://localhost:${tower.port}/api/events`)
  ]
  // The server ends the streams first: closing the clients first would leave undici's spare
  // connection for app.close() to wait on (nodejs/undici#5845).
  t.teardown(async () => {
    await tower.app.close()
    for (const tab of tabs) tab.client.close()
  })
  await waitFor('five streams', () => tower.app.sse.size === 5 && tabs.every((tab) => tab.client.readyState === TowerSseClient.OPEN), WAIT_MS)
  t.same(tabs.map((tab) => tab.client.tabRole), ['leader', 'leader', 'leader', 'own', 'own'])
})

t.test('a fatal answer reaches every tab: all closed with the error; a tab that joins late sees the state', async (t) => {
  const { tower } = await startTowerPage(t)
  t.teardown(() => tower.app.close())

  const first = openTab('/api/events?topics=late')
  await waitFor('the first tab to lead', () => first.client.readyState === TowerSseClient.OPEN, WAIT_MS)
  const late = openTab('/api/events?topics=late')
  await waitFor('the late tab to learn the state', () => late.client.readyState === TowerSseClient.OPEN, TAB_LEASE.leaseMs)
  t.equal(late.client.tabRole, 'follower', 'the leader answered its hello')
  first.client.close()
  late.client.close()

  const tabs = [0, 1, 2].map(() => openTab('/no-such-route'))
  const errors: string[] = []
  for (const tab of tabs) tab.client.addEventListener('error', (event) => { if (event instanceof TowerSseErrorEvent) errors.push(event.error.message) })
  await waitFor('every tab closed', () => tabs.every((tab) => tab.client.readyState === TowerSseClient.CLOSED), WAIT_MS)
  for (const tab of tabs) t.match(tab.client.state, { kind: 'closed', error: { status: 404, fatal: true, message: /HTTP 404/ } })
  t.equal(errors.length, 3, 'one error per tab')
})

t.test('the answer\'s `end`, a 204 and the server\'s own error reach every tab and close each one', async (t) => {
  let release!: () => void
  const released = new Promise<void>((resolve) => { release = resolve })
  const app = Fastify({ logger: false })
  await app.register(towerSse, { path: false, heartbeatMs: 60_000 })
  const requests: string[] = []
  app.addHook('onRequest', async (request) => { requests.push(request.url) })
  app.get('/answer', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
    stream: (async function * () {
      yield { data: 'token 0' }
      await released
      yield { data: 'token 1' }
    })()
  }))
  app.get('/done', (_request, reply) => reply.code(204).send())
  app.get('/fails', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
    stream: (async function * () {
      yield { data: 'token 0' }
      throw new Error('the model fell over')
    })()
  }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  Object.assign(globalThis, { location: { href: `${base}/`, origin: base } })
  t.teardown(() => { Reflect.deleteProperty(globalThis, 'location') })

  /** Three tabs on one path, each with what it saw: server events as `type:data`, an `end` Event, its own errors. */
  const openTabs = (path: string): Array<{ client: TowerSseClient, seen: string[] }> => [0, 1, 2].map(() => {
    const client = new TowerSseClient(path)
    const seen: string[] = []
    client.addEventListener('message', (event) => seen.push(event.data))
    client.addEventListener('end', (event) => seen.push(event instanceof MessageEvent ? `end:${String(event.data)}` : 'end (no data)'))
    client.addEventListener('error', (event) => seen.push(event instanceof TowerSseErrorEvent ? `client error (${event.code} ${String(event.serverCode)})` : `error:${event.data}`))
    t.teardown(() => client.close())
    return { client, seen }
  })

  const answer = openTabs('/answer')
  await waitFor('every tab to have the first token', () => answer.every((tab) => tab.seen.length === 1), WAIT_MS)
  t.same(answer.map((tab) => tab.client.tabRole).sort(), ['follower', 'follower', 'leader'])
  release()
  await waitFor('every tab to close', () => answer.every((tab) => tab.client.readyState === TowerSseClient.CLOSED), WAIT_MS)
  t.same(answer.map((tab) => tab.seen), answer.map(() => ['token 0', 'token 1', 'end:{}']), 'every tab: the tokens, then `end`')
  t.same(answer.map((tab) => tab.client.state), answer.map(() => ({ kind: 'closed', error: null })), 'every tab closed as done')

  const done = openTabs('/done')
  await waitFor('every tab to close', () => done.every((tab) => tab.client.readyState === TowerSseClient.CLOSED), WAIT_MS)
  t.same(done.map((tab) => tab.seen), done.map(() => ['end (no data)']), 'every tab: an `end` Event, no error')
  t.same(done.map((tab) => tab.client.state), done.map(() => ({ kind: 'closed', error: null })))

  const fails = openTabs('/fails')
  await waitFor('every tab to close', () => fails.every((tab) => tab.client.readyState === TowerSseClient.CLOSED), WAIT_MS)
  t.same(fails.map((tab) => tab.seen), fails.map(() => ['token 0', 'error:{"code":"TOWER_SSE_STREAM_FAILED"}', 'client error (TOWER_SSE_CLIENT_SERVER_ERROR TOWER_SSE_STREAM_FAILED)']),
    'every tab: the server\'s error, then the fatal one with its code')
  for (const tab of fails) t.match(tab.client.state, { kind: 'closed', error: { code: 'TOWER_SSE_CLIENT_SERVER_ERROR', serverCode: 'TOWER_SSE_STREAM_FAILED', fatal: true } })
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.same(requests, ['/answer', '/done', '/fails'], 'one request each, by the leader; none asked again')
})

t.test('a follower drops an event whose id it already delivered (an old leader relayed it, the new one replays it)', async (t) => {
  const name = `dedupe-${Math.random()}`
  const delivered: string[] = []
  const states: string[] = []
  let lastEventId = ''
  const follower = new TabShare(name, () => { throw new Error('a follower opens no stream') }, {
    state: (state) => states.push(state.kind),
    open: () => states.push('open event'),
    message: (message) => { delivered.push(`${message.id ?? '-'}:${message.data}`) },
    error: () => states.push('error event'),
    end: () => states.push('end event'),
    role: () => {},
    lastEventId: () => lastEventId,
    setLastEventId: (id) => { lastEventId = id }
  }, undefined)
  // The other side of the channel plays the leaders: the lowest tab id, so the follower never claims.
  const leaders = new BroadcastChannel(name)
  t.teardown(() => {
    follower.close()
    leaders.close()
  })
  const hello = new Promise<void>((resolve) => { leaders.onmessage = (event) => { if (event.data.t === 'hello') resolve() } })
  follower.start()
  await hello
  const relay = (id: string | undefined, data: string): void =>
    leaders.postMessage({ t: 'message', message: { type: 'message', data, id, lastEventId: id ?? '7', origin: 'http://x' } })
  leaders.postMessage({ t: 'beat', tab: -1 })
  relay('7', 'a')
  relay('8', 'b')
  // The new leader resumed from 7 and replays 8, then goes on; an event without an id always passes.
  leaders.postMessage({ t: 'state', state: { kind: 'open', since: 1 }, lastEventId: '7' })
  relay('8', 'b')
  relay(undefined, 'no id')
  relay('9', 'c')
  await waitFor('the last event', () => delivered.includes('9:c'))
  t.same(delivered, ['7:a', '8:b', '-:no id', '9:c'])
  t.same(states, ['open'])
  t.equal(lastEventId, '7', 'the state relay carries the leader\'s lastEventId')
})

/**
 * One TabShare on a clock the test steps beat by beat, with the other tabs played by the test's
 * own BroadcastChannel (`others`). Its stream is a stand-in that counts opens and closes.
 */
function steppedTab (t: Test): {
  share: TabShare,
  others: BroadcastChannel,
  heard: Array<{ t: string }>,
  delivered: string[],
  roles: TabRole[],
  wires: { opened: number, closed: number },
  beat: () => void,
  hello: Promise<void>,
  relayed: (id: string) => Promise<void>
} {
  const name = `stepped-${Math.random()}`
  let now = 1_000_000
  let tick = (): void => { throw new Error('the tab started no heartbeat timer') }
  const clock: TabClock = { now: () => now, every: (run) => { tick = run; return () => {} } }
  const delivered: string[] = []
  const roles: TabRole[] = []
  const wires = { opened: 0, closed: 0 }
  let lastEventId = ''
  const openWire = (): StreamWire => {
    wires.opened++
    return { start: () => {}, close: () => { wires.closed++ }, state: { kind: 'connecting' }, lastEventId: '' } as unknown as StreamWire
  }
  const share = new TabShare(name, openWire, {
    state: () => {},
    open: () => {},
    message: (message) => { delivered.push(message.id ?? '-') },
    error: () => {},
    end: () => {},
    role: (role) => roles.push(role),
    lastEventId: () => lastEventId,
    setLastEventId: (id) => { lastEventId = id }
  }, undefined, clock)
  const others = new BroadcastChannel(name)
  const heard: Array<{ t: string }> = []
  let onHello = (): void => {}
  const hello = new Promise<void>((resolve) => { onHello = resolve })
  others.onmessage = (event: MessageEvent<{ t: string }>) => {
    heard.push(event.data)
    if (event.data.t === 'hello') onHello()
  }
  t.teardown(() => {
    share.close()
    others.close()
  })
  return {
    share,
    others,
    heard,
    delivered,
    roles,
    wires,
    beat: () => {
      now += TAB_LEASE.beatMs
      tick()
    },
    hello,
    // Messages from one channel arrive in order: once this relay is delivered, everything posted before it was handled.
    relayed: async (id) => {
      others.postMessage({ t: 'message', message: { type: 'message', data: id, id, lastEventId: id, origin: 'http://x' } })
      await waitFor(`the relay of event ${id} to be delivered`, () => delivered.includes(id))
    }
  }
}

t.test('the seen-id set is bounded: after 1,025 distinct ids the first is delivered again, the others are still dropped', async (t) => {
  const tab = steppedTab(t)
  tab.share.start()
  await tab.hello
  tab.others.postMessage({ t: 'beat', tab: -1 })
  for (let id = 0; id <= 1024; id++) {
    tab.others.postMessage({ t: 'message', message: { type: 'message', data: 'x', id: String(id), lastEventId: String(id), origin: 'http://x' } })
  }
  await waitFor('1,025 relays delivered', () => tab.delivered.length === 1025)
  tab.others.postMessage({ t: 'message', message: { type: 'message', data: 'x', id: '1', lastEventId: '1', origin: 'http://x' } })
  tab.others.postMessage({ t: 'message', message: { type: 'message', data: 'x', id: '1024', lastEventId: '1024', origin: 'http://x' } })
  tab.others.postMessage({ t: 'message', message: { type: 'message', data: 'x', id: '0', lastEventId: '0', origin: 'http://x' } })
  await tab.relayed('end')
  t.same(tab.delivered.slice(1025), ['0', 'end'], 'ids 1 and 1024 are still remembered; 0, the oldest, was forgotten')
})

t.test('a leader that resigns is followed within 2 beats; its close() says so', async (t) => {
  const tab = steppedTab(t)
  tab.share.start()
  await tab.hello
  tab.others.postMessage({ t: 'beat', tab: -1 })
  await tab.relayed('a')
  tab.beat()
  t.equal(tab.wires.opened, 0, 'a leader that beats keeps its lease')
  tab.others.postMessage({ t: 'resign', tab: -1 })
  await tab.relayed('b')
  tab.beat()
  tab.beat()
  t.equal(tab.wires.opened, 1, 'claimed at the first beat after the resignation, leading at the second')
  t.same(tab.roles, ['follower', 'leader'])
  await waitFor('its claim and its first beat as the leader', () => tab.heard.length >= 3)
  t.same(tab.heard.map((m) => m.t), ['hello', 'claim', 'beat'], 'it claimed, then beat as the leader')

  tab.share.close()
  await waitFor('the leaving leader to resign', () => tab.heard.at(-1)?.t === 'resign')
  t.equal(tab.wires.closed, 1, 'its stream is closed')
})

t.test('a leader that hears a beat from a lower tab id steps down and closes its stream; a higher one is answered', async (t) => {
  const tab = steppedTab(t)
  tab.share.start()
  await tab.hello
  tab.beat()
  tab.beat()
  t.same([tab.wires.opened, tab.roles], [1, ['follower', 'leader']], 'alone, it claims and leads')
  tab.others.postMessage({ t: 'beat', tab: 2 })
  await waitFor('the leader to answer a higher tab\'s beat with its own', () => tab.heard.filter((m) => m.t === 'beat').length === 2)
  t.equal(tab.wires.closed, 0, 'a higher id does not make it step down')
  tab.others.postMessage({ t: 'beat', tab: -1 })
  await tab.relayed('after')
  t.same([tab.wires.closed, tab.roles], [1, ['follower', 'leader', 'follower']], 'stepped down: its stream closed, a follower again')
  tab.beat()
  t.equal(tab.wires.opened, 1, 'one stream remains: it does not claim while the lower tab leads')
})
