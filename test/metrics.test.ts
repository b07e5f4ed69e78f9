import { withTestClocks } from '../lib/testing'
import { spawnSync } from 'node:child_process'
import type { Socket } from 'node:net'
import path from 'node:path'
import t, { type Test } from 'tap'
import Fastify from 'fastify'
import UnderPressure from '@fastify/under-pressure'
import parsePrometheusTextFormat from 'parse-prometheus-text-format'
import { AggregatorRegistry, Registry } from 'prom-client'
import { StreamStats } from '../lib/observe/stats'
import type { StreamGauges } from '../lib/observe/vocabulary'
import towerSse, { DEFAULTS, type SseStats } from '../lib'
import { registerMetrics, type BusState } from '../lib/observe/metrics'
import { MemoryBus } from '../lib/bus/memory'
import { JITTER_RATIO } from '../lib/shared/jitter'
import { metricsRoute } from '../lib/tower/metrics-route'
import { connect, rawStream, waitFor, type SseConnection } from './fixtures/sse-connection'
import { frozenClock } from './fixtures/moved-clock'
import { scrape, type Scrape } from './fixtures/scrape'
import { queryTopics } from './fixtures/app'

const DISCONNECT_FIELDS = { client: 'disconnected', expired: 'expired', swept: 'deadSwept', dropped: 'dropped', shutdown: 'shutdown' } as const

/** Every tower_sse_ value in `scrape` against the stats() the plugin reports at the same moment. */
function checkAgainstStats (t: Test, scraped: Scrape, stats: SseStats): void {
  t.equal(scraped.value('tower_sse_streams'), stats.current, 'streams = stats().current')
  t.equal(scraped.value('tower_sse_streams_capacity'), stats.capacity, 'capacity = stats().capacity')
  t.equal(scraped.value('tower_sse_connects_total'), stats.accepted, 'connects = stats().accepted')
  let refusals = 0
  for (const [reason, n] of Object.entries(stats.refusals)) {
    t.equal(scraped.value('tower_sse_refusals_total', { reason }), n, `refusals{${reason}} = stats().refusals.${reason}`)
    refusals += scraped.value('tower_sse_refusals_total', { reason })
  }
  t.equal(refusals, stats.rejected, 'refusals summed = stats().rejected')
  for (const [cause, field] of Object.entries(DISCONNECT_FIELDS)) {
    t.equal(scraped.value('tower_sse_disconnects_total', { cause }), stats[field], `disconnects{${cause}} = stats().${field}`)
  }
  for (const [outcome, n] of Object.entries(stats.resumes)) {
    t.equal(scraped.value('tower_sse_resumes_total', { outcome }), n, `resumes{${outcome}} = stats().resumes.${outcome}`)
  }
  t.equal(scraped.value('tower_sse_replayed_events_total'), stats.replayedEvents, 'replayed events = stats().replayedEvents')
  t.equal(scraped.value('tower_sse_events_total'), stats.events, 'events = stats().events')
  t.equal(scraped.value('tower_sse_broadcasts_total'), stats.broadcasts, 'broadcasts = stats().broadcasts')
  t.equal(scraped.histogram('tower_sse_broadcast_seconds').count, stats.events, 'one broadcast_seconds observation per event fanned out')
  t.equal(scraped.value('tower_sse_bytes_sent_total'), stats.bytesSent, 'bytes sent = stats().bytesSent')
  t.equal(scraped.value('tower_sse_refusals_held'), stats.refusalsHeld, 'held = stats().refusalsHeld')
  t.equal(scraped.value('tower_sse_storm'), stats.stormLevel, 'storm = stats().stormLevel')
}

/** The reason a refusal's JSON body gives. */
async function refusalReason (conn: SseConnection): Promise<string> {
  await conn.ended
  return (JSON.parse(conn.body) as { reason: string }).reason
}

t.test('after a scripted scenario on real sockets, GET /metrics gives exactly what happened, and what stats() says', async (t) => {
  let healthy = true
  let nextRandom = 0.5
  // Every delay is its value ± JITTER_RATIO: value + (2r - 1) × ratio × value. No draw in [0, 1) takes
  // 60 s below 48 s, so the one stream that must expire within the scenario is given the r (below
  // Math.random's range) that puts its lifetime at 100 ms; while it opens, its retry: is drawn low too.
  const SHORT_LIFE = ((100 - 60_000) / (JITTER_RATIO * 60_000) + 1) / 2
  const metrics = new Registry()
  // return503OnClosing false: during the drain, requests reach tower-sse (the "closing" refusal) and /metrics.
  const app = Fastify({ logger: false, return503OnClosing: false })
  await app.register(UnderPressure, { healthCheck: async () => healthy, healthCheckInterval: 10 })
  await app.register(towerSse, withTestClocks({
    metrics,
    maxClients: 5,
    maxClientsPerKey: 2,
    keyFn: (request) => String(request.headers['x-client'] ?? 'anon'),
    topicsFromRequest: queryTopics,
    // random 0.5: every stream lives 60 s; SHORT_LIFE: 100 ms (the one that expires).
    maxAgeMs: 60_000,
    heartbeatMs: 60_000,
    maxBufferedBytes: 64 * 1024,
    drainMs: 6000,
    connectRate: { perSecond: 1, burst: 10 },
    storm: { tarpitMs: 0, refusalsPerSecond: 1000 },
    history: { events: 3 }
  }, { random: () => nextRandom }))
  await app.register(metricsRoute, { registry: metrics })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const port = (app.server.address() as { port: number }).port
  const readers: SseConnection[] = []
  let slow: ReturnType<typeof rawStream> | undefined
  let closing = false
  // A failure part-way must not leave the server (and its 60 s streams) holding the file open.
  t.teardown(async () => {
    for (const c of readers) c.destroy()
    slow?.socket.destroy()
    if (!closing) await app.close()
  })
  const open = async (client: string, headers: Record<string, string> = {}): Promise<SseConnection> => {
    const conn = await connect(port, '/api/events?topics=news', { 'x-client': client, ...headers })
    if (conn.status === 200) readers.push(conn)
    return conn
  }
  const expected = { accepted: 0, capacity: 0, perKey: 0, pressure: 0, rate: 0, closing: 0, client: 0, expired: 0, dropped: 0, shutdown: 0, replayed: 0, resync: 0, fresh: 0, replayedEvents: 0, broadcasts: 0 }

  // Two streams of one client, and a third it may not have.
  const a1 = await open('a')
  const a2 = await open('a')
  expected.accepted += 2
  expected.fresh += 2
  t.equal(await refusalReason(await open('a')), 'perKey')
  expected.perKey++

  // Three events; one client resumes after the first (replays two), one with an id from elsewhere (resync).
  for (let i = 1; i <= 3; i++) app.sse.broadcast({ i })
  expected.broadcasts += 3
  const firstId = (await a1.nextEvent(0)).id
  const resumed = await open('r', { 'last-event-id': firstId as string })
  t.same((await resumed.nextEvent(1)).data, '{"i":3}', 'the resumed stream got the two events it missed')
  expected.accepted++
  expected.replayed++
  expected.replayedEvents += 2
  resumed.destroy()
  await waitFor('the resumed client to be gone', () => app.sse.stats().disconnected === 1)
  expected.client++
  const resync = await open('s', { 'last-event-id': 'zzzz-1' })
  t.equal((await resync.nextEvent(0)).event, 'resync')
  expected.accepted++
  expected.resync++

  // One stream drawn a 100 ms lifetime expires.
  nextRandom = SHORT_LIFE
  const expiring = await open('e')
  nextRandom = 0.5
  expected.accepted++
  expected.fresh++
  await expiring.ended
  await waitFor('the expiry to be counted', () => app.sse.stats().expired === 1)
  expected.expired++

  // A client that stops reading is dropped at its byte budget; only it wants topic "bulk".
  slow = rawStream(port, '/api/events?topics=bulk')
  await waitFor('the slow stream to open', () => slow?.received() !== 0)
  slow.socket.pause()
  expected.accepted++
  expected.fresh++
  const payload = 'b'.repeat(8 * 1024)
  let slowQueued = Buffer.byteLength('retry: 5000\n\n')
  for (let i = 0; i < 2000 && app.sse.stats().dropped === 0; i++) {
    if ((await app.sse.broadcast(payload, { topic: 'bulk' })).delivered === 1) slowQueued += Buffer.byteLength(`id: ${app.sse.lastEventId}\ndata: ${payload}\n\n`)
    expected.broadcasts++
    // Each broadcast gets its own turn: a frame is counted as sent once flushed to the socket, and
    // a frame still queued in the turn the client is dropped is never sent.
    await new Promise((resolve) => setImmediate(resolve))
  }
  expected.dropped++

  // Fill up: two more streams, then one too many.
  await open('b1')
  const b2 = await open('b2')
  expected.accepted += 2
  expected.fresh += 2
  t.equal(app.sse.size, 5)
  t.equal(await refusalReason(await open('c')), 'capacity')
  expected.capacity++

  // With room again but the server under pressure.
  await waitFor('b2 to have read its retry frame', () => b2.retries.length === 1)
  b2.destroy()
  await waitFor('b2 to be gone', () => app.sse.size === 4)
  expected.client++
  healthy = false
  await waitFor('under-pressure to see the failed health check', () => app.isUnderPressure())
  t.equal(await refusalReason(await open('p')), 'pressure')
  expected.pressure++
  healthy = true
  await waitFor('the pressure to pass', () => !app.isUnderPressure())

  // Connect and leave until the token bucket is empty.
  for (let i = 0; i < 40; i++) {
    const q = await open(`q${i}`)
    if (q.status !== 200) {
      t.equal(await refusalReason(q), 'rate')
      expected.rate++
      break
    }
    expected.accepted++
    expected.fresh++
    await waitFor('q to read its retry frame', () => q.retries.length === 1)
    q.destroy()
    await waitFor('q to be gone', () => app.sse.size === 4)
    expected.client++
  }
  t.equal(expected.rate, 1, 'the bucket ran out')

  // Every frame the server queued was read by a client, except the slow client's own count.
  const readBytes = (): number => readers.reduce((sum, c) => sum + Buffer.byteLength(c.body), 0) + slowQueued
  await waitFor('every reader to have read what was queued for it', () => readBytes() === app.sse.stats().bytesSent)

  const first = await scrape(port)
  const stats = app.sse.stats()
  t.equal(first.status, 200)
  t.equal(first.contentType, 'text/plain; version=0.0.4; charset=utf-8')
  checkAgainstStats(t, first, stats)
  t.equal(first.value('tower_sse_streams'), 4)
  t.equal(first.value('tower_sse_streams_capacity'), 5)
  t.equal(first.value('tower_sse_connects_total'), expected.accepted)
  for (const reason of ['capacity', 'perKey', 'pressure', 'rate', 'closing'] as const) {
    t.equal(first.value('tower_sse_refusals_total', { reason }), expected[reason], `refusals{${reason}} = ${expected[reason]}`)
  }
  for (const cause of ['client', 'expired', 'dropped', 'shutdown'] as const) {
    t.equal(first.value('tower_sse_disconnects_total', { cause }), expected[cause], `disconnects{${cause}} = ${expected[cause]}`)
  }
  t.equal(first.value('tower_sse_disconnects_total', { cause: 'swept' }), 0)
  for (const outcome of ['replayed', 'resync', 'fresh'] as const) {
    t.equal(first.value('tower_sse_resumes_total', { outcome }), expected[outcome], `resumes{${outcome}} = ${expected[outcome]}`)
  }
  t.equal(first.value('tower_sse_replayed_events_total'), expected.replayedEvents)
  t.equal(first.value('tower_sse_broadcasts_total'), expected.broadcasts)
  t.equal(first.value('tower_sse_bytes_sent_total'), readBytes(), 'bytes sent = the bytes the clients read (+ what the dropped one was queued)')
  t.equal(first.value('tower_sse_refusals_held'), 0)
  t.equal(first.value('tower_sse_storm'), 0)
  const labelNames = new Set([...first.families.values()].filter((f) => f.name.startsWith('tower_sse_'))
    .flatMap((f) => f.metrics.flatMap((s) => Object.keys(s.labels ?? {}))))
  t.same([...labelNames].sort(), ['cause', 'outcome', 'reason'], 'bounded labels only: no client, key or topic')

  // Shutdown: the drain ends the two streams 3 s apart; in between, a new stream is refused as closing.
  for (const c of [a2, resync]) c.destroy()
  await waitFor('two streams left', () => app.sse.size === 2)
  expected.client += 2
  closing = true
  const closed = app.close()
  await waitFor('the drain to end the first stream', () => app.sse.stats().shutdown === 1)
  expected.shutdown++
  t.equal(await refusalReason(await open('late')), 'closing')
  expected.closing++
  const during = await scrape(port)
  checkAgainstStats(t, during, app.sse.stats())
  t.equal(during.value('tower_sse_refusals_total', { reason: 'closing' }), 1)
  t.equal(during.value('tower_sse_disconnects_total', { cause: 'shutdown' }), 1)
  t.equal(during.value('tower_sse_disconnects_total', { cause: 'client' }), expected.client)
  t.equal(during.value('tower_sse_streams'), 1)
  await closed
  t.equal(metrics.getSingleMetric('tower_sse_streams'), undefined, 'closing the app takes its metrics out of the registry')
})

t.test('without the metrics option prom-client is never loaded', async (t) => {
  const child = spawnSync(process.execPath, [...process.execArgv, path.join(__dirname, 'fixtures', 'prom-client-loaded.ts')], { encoding: 'utf8' })
  t.equal(child.status, 0, child.stderr)
  t.same(JSON.parse(child.stdout), {
    withoutOption: { promClient: false, metricsModule: false },
    withOption: { promClient: true, metricsModule: true }
  }, 'registered and broadcasting without the option: neither prom-client nor lib/metrics is in require.cache')
})

t.test('a metrics option that is not a prom-client Registry is refused at register time, naming the option', async (t) => {
  for (const bad of [{}, 'registry', true, { registerMetric: () => undefined }]) {
    const app = Fastify({ logger: false })
    await t.rejects(async () => { await app.register(towerSse, { metrics: bad as unknown as Registry }) },
      { name: 'TowerSseOptionError', option: 'metrics', message: /option "metrics" must be a prom-client Registry/ })
  }
})

t.test('a client that takes no byte across heartbeats is swept, and counted as swept', async (t) => {
  const metrics = new Registry()
  const app = Fastify({ logger: false })
  await app.register(towerSse, { metrics, heartbeatMs: 100, maxBufferedBytes: 1024 * 1024 })
  await app.register(metricsRoute, { registry: metrics })
  const sockets = new Map<number, Socket>()
  app.server.on('connection', (socket: Socket) => sockets.set(socket.remotePort as number, socket))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const port = (app.server.address() as { port: number }).port
  const dead = rawStream(port)
  t.teardown(() => dead.socket.destroy())
  await waitFor('the stream to open', () => dead.received() > 0)
  dead.socket.pause()
  const server = sockets.get(dead.socket.localPort as number) as Socket
  // Fill the kernel buffers until the server's own queue stays backed up once written out
  // (a tick later: Node corks a response's writes), well below the 1 MiB budget.
  const frame = 'w'.repeat(16 * 1024)
  for (let i = 0; i < 4000 && server.writableLength < 64 * 1024 && app.sse.size === 1; i++) {
    app.sse.broadcast(frame)
    await new Promise((resolve) => setImmediate(resolve))
  }
  await waitFor('the heartbeat to sweep the stalled stream', () => app.sse.size === 0, 10_000)
  const scraped = await scrape(port)
  checkAgainstStats(t, scraped, app.sse.stats())
  t.equal(scraped.value('tower_sse_disconnects_total', { cause: 'swept' }), 1)
  t.equal(scraped.value('tower_sse_disconnects_total', { cause: 'dropped' }), 0, 'swept as dead, not dropped at the budget')
  t.equal(scraped.value('tower_sse_streams'), 0)
})

t.test('during a storm, the held refusals and the widening level are gauges', async (t) => {
  const metrics = new Registry()
  const app = Fastify({ logger: false })
  const clock = frozenClock()
  await app.register(towerSse, withTestClocks({ metrics, maxClients: 1, storm: { refusalsPerSecond: 1, tarpitMs: 20_000 } }, { monotonicNow: clock.now }))
  await app.register(metricsRoute, { registry: metrics })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const port = (app.server.address() as { port: number }).port
  const holder = await connect(port)
  // Refusals 50 ms apart for 2.2 s of the storm meter's clock (monotonicNow, moved on by the test once
  // each refusal is counted): each second has more than one, so the level rises; most are held.
  const attempts: Array<Promise<SseConnection>> = []
  for (let i = 0; i < 44; i++) {
    attempts.push(connect(port))
    await waitFor(`refusal ${i + 1} to be counted`, () => app.sse.stats().rejected === i + 1)
    clock.skip(50)
  }
  const answered = new Set<number>()
  attempts.forEach((attempt, i) => { void attempt.then(() => answered.add(i)) })
  await waitFor('held refusals to settle', () => app.sse.stats().refusalsHeld === attempts.length - answered.size)
  const before = app.sse.stats()
  const scraped = await scrape(port)
  const after = app.sse.stats()
  t.equal(scraped.value('tower_sse_refusals_held'), attempts.length - answered.size, 'held = refusals not yet answered')
  t.ok(scraped.value('tower_sse_refusals_held') > 30, `${scraped.value('tower_sse_refusals_held')} refusals held`)
  t.equal(scraped.value('tower_sse_refusals_held'), before.refusalsHeld)
  const level = scraped.value('tower_sse_storm')
  t.ok(level >= 1, `storm level ${level}`)
  t.ok(level === before.stormLevel || level === after.stormLevel, 'storm = stats().stormLevel read around the scrape')
  t.equal(scraped.value('tower_sse_refusals_total', { reason: 'capacity' }), 44)
  await app.close()
  await Promise.all(attempts)
  holder.destroy()
})

t.test('bus metrics come from the bus-state provider, and exist only with one', async (t) => {
  const counts = new StreamStats()
  const source = {
    stats: () => counts.read(idleGauges(), { refusalsHeld: 0, stormLevel: 0 }),
    timeBroadcasts: () => {}
  }
  let state: BusState | null = null
  const target = new Registry()
  registerMetrics(target, source, () => state)
  const read = async (): Promise<Map<string, string | undefined>> =>
    new Map(parsePrometheusTextFormat(await target.metrics()).map((f) => [f.name, f.metrics[0].value]))
  let families = await read()
  t.same([families.get('tower_sse_bus_up'), families.get('tower_sse_bus_lag_seconds'), families.get('tower_sse_bus_reads_total')],
    ['0', '0', '0'], 'no state yet: down')
  state = { up: true, outOfMemory: false, lagSeconds: 0.25, reads: 7, refusedPublishes: 0 }
  families = await read()
  t.same([families.get('tower_sse_bus_up'), families.get('tower_sse_bus_lag_seconds'), families.get('tower_sse_bus_reads_total')],
    ['1', '0.25', '7'])
  state = { up: false, outOfMemory: true, lagSeconds: 3, reads: 9, refusedPublishes: 4 }
  families = await read()
  t.same([families.get('tower_sse_bus_up'), families.get('tower_sse_bus_lag_seconds'), families.get('tower_sse_bus_reads_total')],
    ['0', '3', '9'])
  t.same([families.get('tower_sse_bus_out_of_memory'), families.get('tower_sse_bus_refused_publishes_total')], ['1', '4'], 'out of memory, and its refusals counted')

  const withoutBus = new Registry()
  const unregister = registerMetrics(withoutBus, source)
  const names = parsePrometheusTextFormat(await withoutBus.metrics()).map((f) => f.name)
  t.equal(names.filter((name) => name.startsWith('tower_sse_bus_')).length, 0, 'no bus, no bus metrics')
  t.equal(names.length, 13, 'the thirteen stream metrics')
  unregister()
  t.same(await withoutBus.getMetricsAsJSON(), [], 'and unregister takes every one back out')
})

t.test('aggregated over workers (as the cluster primary does), the storm level is the highest and bus_up the lowest', async (t) => {
  /** One worker's metrics registry, its storm level and bus state set by the test. */
  const worker = (stormLevel: number, up: boolean): Registry => {
    const counts = new StreamStats()
    const source = {
      stats: () => counts.read(idleGauges(), { refusalsHeld: 0, stormLevel }),
      timeBroadcasts: () => {}
    }
    const target = new Registry()
    registerMetrics(target, source, () => ({ up, outOfMemory: false, lagSeconds: 0, reads: 0, refusedPublishes: 0 }))
    return target
  }
  const aggregate = async (workers: Registry[]): Promise<Map<string, string | undefined>> => {
    const merged = AggregatorRegistry.aggregate(await Promise.all(workers.map((w) => w.getMetricsAsJSON())))
    return new Map(parsePrometheusTextFormat(await merged.metrics()).map((f) => [f.name, f.metrics[0].value]))
  }
  const both = await aggregate([worker(2, true), worker(1, true)])
  t.same([both.get('tower_sse_storm'), both.get('tower_sse_bus_up'), both.get('tower_sse_streams_capacity')], ['2', '1', '20'],
    'storm: the max of 2 and 1; bus up on both: 1, not 2; capacities summed')
  const oneDown = await aggregate([worker(0, true), worker(0, false)])
  t.equal(oneDown.get('tower_sse_bus_up'), '0', 'one worker\'s bus down: the cluster\'s is down')
})

/** What an instance with no stream holds, as stats() reads it. */
function idleGauges (): StreamGauges {
  return { current: 0, capacity: 10, historyEvents: 0, historyBytes: 0, openStreamBytes: 0, bus: new MemoryBus(DEFAULTS.history.idempotencyWindowMs).stats() }
}
