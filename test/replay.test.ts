import t from 'tap'
import { EventSource } from 'eventsource'
import { queryTopics, queryTopicsOrAll, startApp } from './fixtures/app'
import { connect, waitFor } from './fixtures/sse-connection'

t.test('every broadcast gets an increasing id; Last-Event-ID replays what was missed, in order', async (t) => {
  const { app, port } = await startApp()
  t.teardown(() => app.close())
  const first = await connect(port)
  for (let i = 0; i < 5; i++) app.sse.broadcast({ n: i })
  await waitFor('5 events', () => first.events.length === 5)
  const ids = first.events.map((e) => e.id as string)
  t.match(ids[0], /^[0-9a-z]+-1$/)
  t.same(ids.map((id) => Number(id.split('-')[1])), [1, 2, 3, 4, 5], 'ids increase by one')
  t.equal(app.sse.lastEventId, ids[4])
  first.destroy()

  const viaHeader = await connect(port, '/api/events', { 'last-event-id': ids[1] })
  await waitFor('3 replayed events', () => viaHeader.events.length === 3)
  t.same(viaHeader.events.map((e) => JSON.parse(e.data).n), [2, 3, 4])
  t.same(viaHeader.events.map((e) => e.id), ids.slice(2))
  app.sse.broadcast({ n: 5 })
  await waitFor('then the live event', () => viaHeader.events.length === 4)
  t.equal(JSON.parse(viaHeader.events[3].data).n, 5, 'live events follow the replay, no gap')

  const viaQuery = await connect(port, `/api/events?lastEventId=${ids[3]}`)
  await waitFor('replay via query', () => viaQuery.events.length === 2)
  t.same(viaQuery.events.map((e) => JSON.parse(e.data).n), [4, 5])

  const upToDate = await connect(port, '/api/events', { 'last-event-id': app.sse.lastEventId as string })
  await waitFor('the up-to-date stream to open', () => app.sse.size === 3)
  await app.sse.broadcast({ n: 'live' })
  t.same((await upToDate.nextEvent(0)).data, '{"n":"live"}', 'nothing to replay for a client that is up to date: its first event is the next live one')
  for (const c of [viaHeader, viaQuery, upToDate]) c.destroy()
})

t.test('too far behind, or an id from before a restart: an explicit resync, not a silent gap', async (t) => {
  const { app, port } = await startApp({ history: { events: 10 } })
  t.teardown(() => app.close())
  const probe = await connect(port)
  for (let i = 0; i < 30; i++) app.sse.broadcast({ n: i })
  await waitFor('30 events', () => probe.events.length === 30)
  probe.destroy()
  t.equal(app.sse.stats().historyEvents, 10)
  const epoch = (app.sse.lastEventId as string).split('-')[0]

  const behind = await connect(port, '/api/events', { 'last-event-id': `${epoch}-5` })
  const resync = await behind.nextEvent(0)
  t.equal(resync.event, 'resync')
  t.equal(resync.id, app.sse.lastEventId, 'the resync moves the client to the newest id')
  t.same(JSON.parse(resync.data), { reason: 'too-old', lastEventId: app.sse.lastEventId })

  const edge = await connect(port, '/api/events', { 'last-event-id': `${epoch}-20` })
  await waitFor('the 10 held events', () => edge.events.length === 10)
  t.equal(JSON.parse(edge.events[0].data).n, 20, 'an id just before the oldest held event still replays')

  for (const stale of ['zzz-3', `${epoch}-999`]) {
    const c = await connect(port, '/api/events', { 'last-event-id': stale })
    const e = await c.nextEvent(0)
    t.equal(e.event, 'resync', `${stale} is unknown`)
    t.equal(JSON.parse(e.data).reason, 'unknown')
    c.destroy()
  }
  for (const c of [behind, edge]) c.destroy()
})

t.test('a replay from the ring larger than the client\'s unsent-bytes budget is one resync, not a drop and the same replay on every reconnect', async (t) => {
  const { app, port } = await startApp({ maxBufferedBytes: 4096, history: { events: 1000 } })
  t.teardown(() => app.close())
  // About 150 bytes a frame: 10 fit in 4,096 bytes, 99 do not. No client yet: the ring keeps them.
  for (let n = 0; n < 100; n++) await app.sse.broadcast({ n, pad: 'x'.repeat(100) })
  const epoch = (app.sse.lastEventId as string).split('-')[0]
  const near = await connect(port, '/api/events', { 'last-event-id': `${epoch}-90` })
  await waitFor('10 replayed events', () => near.events.length === 10)
  t.equal(JSON.parse(near.events[0].data).n, 90)
  const far = await connect(port, '/api/events', { 'last-event-id': `${epoch}-1` })
  const resync = await far.nextEvent(0)
  t.same([resync.event, resync.id, JSON.parse(resync.data).reason], ['resync', app.sse.lastEventId, 'too-old'])
  await app.sse.broadcast({ n: 'live' })
  t.equal((await far.nextEvent(1)).data, '{"n":"live"}', 'the stream stays open and goes on live')
  t.same([app.sse.stats().dropped, app.sse.stats().resumes], [0, { replayed: 1, resync: 1, fresh: 0 }], 'no drop; one replay, one resync')
  for (const c of [near, far]) c.destroy()
})

t.test('a malformed or over-long Last-Event-ID is none the bus issued: a resync first, then live events; nothing injected', async (t) => {
  const { app, port } = await startApp()
  t.teardown(() => app.close())
  app.sse.broadcast('x')
  const epoch = (app.sse.lastEventId as string).split('-')[0]
  const bad = ['hello', `${epoch}-0`, `${epoch}-01`, `${epoch}-${'9'.repeat(20)}`, `${epoch}-1`.padEnd(1025, '0')]
  for (const id of bad) {
    const c = await connect(port, '/api/events', { 'last-event-id': id })
    const first = await c.nextEvent(0)
    app.sse.broadcast('live')
    t.same([first.event, JSON.parse(first.data).reason, (await c.nextEvent(1)).data], ['resync', 'unknown', 'live'], `${id.slice(0, 30)}…`)
    c.destroy()
  }
  const viaQuery = await connect(port, `/api/events?lastEventId=${encodeURIComponent(`${epoch}-1\n\ndata: injected`)}`)
  const first = await viaQuery.nextEvent(0)
  app.sse.broadcast('live')
  t.same([first.event, (await viaQuery.nextEvent(1)).data], ['resync', 'live'], 'an id with a line break: resynced, nothing injected')
  t.notMatch(viaQuery.body, /injected/)
  viaQuery.destroy()
})

t.test('a real EventSource across max-age expiries receives 1,000 events with no gap or duplicate', async (t) => {
  const { app, port } = await startApp({ maxAgeMs: 250, retryMs: 30 })
  t.teardown(() => app.close())
  const received: number[] = []
  let opens = 0
  const source = new EventSource(`http://127.0.0.1:${port}/api/events`)
  source.addEventListener('open', () => { opens++ })
  source.addEventListener('message', (e) => { received.push(JSON.parse(e.data).n) })
  t.teardown(() => source.close())
  await waitFor('the first open', () => opens === 1)
  for (let n = 0; n < 1000; n++) {
    app.sse.broadcast({ n })
    if (n % 10 === 9) await new Promise((resolve) => setTimeout(resolve, 15))
  }
  // A last event after the 1,000: any duplicate of one of them would arrive before it.
  app.sse.broadcast({ n: 1000 })
  await waitFor('every event and the last one', () => received.includes(1000), 15_000)
  t.equal(received.length, 1001, 'no duplicate')
  t.same(received, Array.from({ length: 1001 }, (_, n) => n), 'in order, no gap')
  t.ok(app.sse.stats().expired >= 3, `the stream expired ${app.sse.stats().expired} times meanwhile`)
  t.comment(`1000 events over ${opens} connections (${app.sse.stats().expired} expiries)`)
})

t.test('topics: a broadcast reaches only streams granted its topic (or ALL_TOPICS)', async (t) => {
  const { app, port } = await startApp({ topicsFromRequest: queryTopicsOrAll })
  t.teardown(() => app.close())
  const a = await connect(port, '/api/events?topics=ws-a')
  const ab = await connect(port, '/api/events?topics=ws-a,ws-b')
  const all = await connect(port)
  await waitFor('3 streams', () => app.sse.size === 3)
  t.equal((await app.sse.broadcast('for a', { topic: 'ws-a' })).delivered, 3)
  t.equal((await app.sse.broadcast('for b', { topic: 'ws-b' })).delivered, 2)
  t.equal((await app.sse.broadcast('for c', { topic: 'ws-c' })).delivered, 1)
  t.equal((await app.sse.broadcast('for everyone')).delivered, 3)
  await waitFor('deliveries', () => all.events.length === 4 && ab.events.length === 3 && a.events.length === 2)
  t.same(a.events.map((e) => e.data), ['for a', 'for everyone'])
  t.same(ab.events.map((e) => e.data), ['for a', 'for b', 'for everyone'])
  const resumed = await connect(port, '/api/events?topics=ws-b', { 'last-event-id': a.events[0].id as string })
  await waitFor('replay', () => resumed.events.length === 2)
  t.same(resumed.events.map((e) => e.data), ['for b', 'for everyone'], 'replay honours topics too')
  await t.rejects(app.sse.broadcast('x', { topic: 'bad topic\n' }), { code: 'TOWER_SSE_BAD_TOPIC' })
  for (const c of [a, ab, all, resumed]) c.destroy()
})

t.test('bad topics are a 400 naming the problem, before any stream header', async (t) => {
  const { app, port } = await startApp({ topicsFromRequest: queryTopics })
  t.teardown(() => app.close())
  const queries = ['topics=', 'topics=a,,b', 'topics=a%0Adata:x', `topics=${'t'.repeat(257)}`, 'topics=a&topics=b',
    `topics=${Array.from({ length: 129 }, (_, i) => `t${i}`).join(',')}`]
  for (const query of queries) {
    const c = await connect(port, `/api/events?${query}`)
    await c.ended
    t.equal(c.status, 400, query)
    t.match(JSON.parse(c.body), { statusCode: 400, code: /^TOWER_SSE_BAD_(SUBSCRIPTION|TOPIC)$/, message: /tower-sse: (topic|a stream may be granted|query parameter "topics")/ })
  }
  t.equal(app.sse.stats().accepted, 0)
})

t.test('topicsFromRequest decides the topics from the request', async (t) => {
  const { app, port } = await startApp({
    topicsFromRequest: (request) => request.headers['x-workspace'] === undefined ? null : [String(request.headers['x-workspace'])]
  })
  t.teardown(() => app.close())
  const ws = await connect(port, '/api/events', { 'x-workspace': 'alpha' })
  await waitFor('open', () => app.sse.size === 1)
  app.sse.broadcast('beta only', { topic: 'beta' })
  app.sse.broadcast('alpha only', { topic: 'alpha' })
  await waitFor('one event', () => ws.events.length === 1)
  t.equal(ws.events[0].data, 'alpha only')
  ws.destroy()
})

t.test('history is bounded by bytes as well as count', async (t) => {
  const { app } = await startApp({ history: { events: 1000, bytes: 10_000 } })
  t.teardown(() => app.close())
  for (let i = 0; i < 100; i++) app.sse.broadcast('z'.repeat(1000))
  const stats = app.sse.stats()
  t.ok(stats.historyBytes <= 10_000, `history holds ${stats.historyBytes} bytes`)
  t.ok(stats.historyEvents >= 9, `${stats.historyEvents} events kept`)
  t.equal(stats.events, 100)
  app.sse.broadcast('big'.repeat(10_000))
  t.equal(app.sse.stats().historyEvents, 1, 'the newest event is kept even when alone it is over budget')
})
