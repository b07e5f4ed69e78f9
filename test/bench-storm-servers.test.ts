import { once } from 'node:events'
import net from 'node:net'
import Fastify from 'fastify'
import t from 'tap'
import { restartTable } from '../benchmarks/storm/report'
import { checkTargets } from '../benchmarks/storm/targets'
import type { ServerSetup, StreamCounts } from '../benchmarks/storm/servers/contract'
import { setupBare503 } from '../benchmarks/storm/servers/bare-503'
import { LEGACY_MAX_CLIENTS, setupLegacy } from '../benchmarks/storm/servers/legacy'
import { setupTowerSse } from '../benchmarks/storm/servers/tower-sse'
import { setupUpstreamFix, UPSTREAM_MAX_CLIENTS } from '../benchmarks/storm/servers/upstream-fix'
import { runRestart } from '../benchmarks/storm/restart'
import type { PopulationSettings, PopulationStart } from '../benchmarks/lib/populations/contract'
import { ClientCounters } from '../benchmarks/lib/populations/counters'
import { startAutocannon } from '../benchmarks/lib/populations/autocannon'
import { startBackoffClients } from '../benchmarks/lib/populations/backoff'
import { startBrowsers } from '../benchmarks/lib/populations/browser'
import { startTowerSseClients } from '../benchmarks/lib/populations/client'
import { startDashboards } from '../benchmarks/lib/populations/dashboard'
import { startHammers } from '../benchmarks/lib/populations/hammer'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

// The storm benchmark's servers, populations and restart, each on a handful of clients: the
// reproductions behave as the originals do (split from bench-storm.test.ts to keep each file short).

/** One server setup on a loopback port, as server-main runs it (without the process around it). */
async function serve (t: tap.Test, setup: ServerSetup, options: Record<string, unknown> = {}): Promise<{ port: number, counts: () => StreamCounts }> {
  // As in server-main: closing must not wait for streams the test still holds.
  const app = Fastify({ forceCloseConnections: true })
  const counts = await setup(app, options)
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { port: (app.server.address() as net.AddressInfo).port, counts }
}

async function connectMany (t: tap.Test, port: number, count: number): Promise<SseConnection[]> {
  const connections = await Promise.all(Array.from({ length: count }, async () => await connect(port)))
  t.teardown(() => { for (const c of connections) c.destroy() })
  return connections
}

t.test('legacy evicts its oldest client at 50 and keeps the socket alive', async (t) => {
  const { port, counts } = await serve(t, setupLegacy)
  const first = await connect(port)
  t.teardown(() => first.destroy())
  await first.nextEvent(0)
  t.equal(first.headers.connection, 'keep-alive')
  t.same(first.retries, [], 'no retry: field, so EventSource waits its default')
  t.match(JSON.parse(first.events[0].data), { type: 'connected' })
  await connectMany(t, port, LEGACY_MAX_CLIENTS - 1)
  t.notOk(first.isEnded())
  const newest = await connect(port)
  t.teardown(() => newest.destroy())
  await first.ended
  t.equal(newest.status, 200, 'the 51st client is admitted…')
  await waitFor('the evicted stream to be counted', () => counts().open === LEGACY_MAX_CLIENTS)
  t.same(counts(), { admitted: 51, rejected: 0, evicted: 1, expired: 0, open: 50 }, '…by ending the oldest')
})

t.test('upstream-fix refuses the 201st client with 503, Retry-After: 5 and a text body', async (t) => {
  const { port, counts } = await serve(t, setupUpstreamFix)
  const streams = await connectMany(t, port, UPSTREAM_MAX_CLIENTS)
  await streams[0].nextEvent(0)
  t.same(streams[0].retries, [5000])
  const refused = await connect(port, '/api/events', { connection: 'keep-alive' })
  t.teardown(() => refused.destroy())
  await refused.ended
  t.equal(refused.status, 503)
  t.equal(refused.headers['retry-after'], '5')
  t.match(refused.headers['content-type'], /^text\/plain/)
  t.equal(refused.headers.connection, 'keep-alive', 'the refusal keeps the connection alive')
  t.same(counts(), { admitted: 200, rejected: 1, evicted: 0, expired: 0, open: 200 })
})

t.test('the tower-sse setup takes JSON options and counts from the plugin', async (t) => {
  const { port, counts } = await serve(t, setupTowerSse, { maxClients: 1 })
  const [stream] = await connectMany(t, port, 1)
  t.match(JSON.parse((await stream.nextEvent(0)).data), { type: 'connected' })
  const refused = await connect(port)
  await refused.ended
  t.equal(refused.status, 503)
  t.same(counts(), { admitted: 1, rejected: 1, evicted: 0, expired: 0, open: 1 })
  await t.rejects(setupTowerSse(Fastify(), { path: '/elsewhere' }), /option "path" is fixed at \/api\/events/)
})

t.test('the bare 503 route refuses everything on tower-sse\'s terms', async (t) => {
  const { port, counts } = await serve(t, setupBare503)
  const refused = await connect(port)
  await refused.ended
  t.equal(refused.status, 503)
  t.equal(refused.headers.connection, 'close')
  t.equal(refused.headers['retry-after'], '5')
  t.same(counts(), { admitted: 0, rejected: 1, evicted: 0, expired: 0, open: 0 })
})

/**
 * A loopback port that refuses every connection and that nothing else can listen on until the test
 * ends: the local end of a connection the test keeps open (the kernel answers a connect there with
 * a reset, and a bind to it fails with EADDRINUSE). A port listened on and closed again is free for
 * the next listen(0) anywhere on the machine: under the suite another test's server took it once,
 * and these clients were answered instead of refused.
 */
async function refusingPort (t: tap.Test): Promise<number> {
  const server = net.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const holder = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1')
  await once(holder, 'connect')
  t.teardown(() => {
    holder.destroy()
    server.close()
  })
  return holder.localPort as number
}

const SETTINGS: PopulationSettings = { hammerDelayMs: 50, stormRate: 40, maxSeconds: 30 }

/** Starts `size` clients of a population against `port`, stopped when the test ends. */
function populate (t: tap.Test, start: PopulationStart, port: number, size: number): ClientCounters {
  const counters = new ClientCounters()
  const population = start(`http://127.0.0.1:${port}/api/events`, size, counters, SETTINGS)
  t.teardown(() => population.close())
  return counters
}

t.test('populations react to a stream and a refusal as their clients do', async (t) => {
  // Each on a server of its own, and mostly waiting out a client's delay: side by side.
  t.jobs = 6
  t.test('browser: one stream, one EventSource that gives up on the 503', async (t) => {
    const { port } = await serve(t, setupTowerSse, { maxClients: 1 })
    const counters = populate(t, startBrowsers, port, 2)
    await waitFor('the refused EventSource to give up', () => counters.snapshot().gaveUp === 1)
    t.match(counters.snapshot(), { attempts: 2, opened: 1, refused: 1, errors: {} })
  })
  t.test('dashboard: the refused one is reopened by hand 2–5 s later', async (t) => {
    const { port } = await serve(t, setupTowerSse, { maxClients: 1 })
    const counters = populate(t, startDashboards, port, 2)
    await waitFor('the manual reconnect to be refused', () => counters.snapshot().refused === 2, 8000)
    t.match(counters.snapshot(), { attempts: 3, opened: 1, gaveUp: 0 })
  })
  t.test('backoff: a refused client comes back after 1 s, then 2 s', async (t) => {
    const { port } = await serve(t, setupTowerSse, { maxClients: 1 })
    const counters = populate(t, startBackoffClients, port, 2)
    await waitFor('the first retry to be refused', () => counters.snapshot().refused === 2, 8000)
    t.match(counters.snapshot(), { attempts: 3, opened: 1 })
  })
  t.test('client: tower-sse/client waits out Retry-After instead of coming back', async (t) => {
    const { port } = await serve(t, setupTowerSse, { maxClients: 1 })
    const counters = populate(t, startTowerSseClients, port, 2)
    await waitFor('both first attempts', () => counters.snapshot().attempts === 2)
    await new Promise((resolve) => setTimeout(resolve, 500))
    t.match(counters.snapshot(), { attempts: 2, opened: 1, refused: 1, gaveUp: 0 })
  })
  t.test('hammer and autocannon keep coming back whatever the answer', async (t) => {
    const { port, counts } = await serve(t, setupBare503)
    const hammered = populate(t, startHammers, port, 1)
    await waitFor('repeated refusals', () => hammered.snapshot().refused >= 3)
    t.equal(hammered.snapshot().opened, 0)
    const before = counts().rejected
    const cannoned = populate(t, startAutocannon, port, 2)
    // The server's count, not autocannon's attempts: an attempt is counted before it arrives.
    await waitFor('autocannon\'s requests to be refused by the server', () => counts().rejected >= before + 3)
    t.ok(cannoned.snapshot().attempts >= 3, 'autocannon counted its attempts too')
  })
  t.test('failed attempts are counted by their system error code', async (t) => {
    const port = await refusingPort(t)
    const hammered = populate(t, startHammers, port, 1)
    const browsed = populate(t, startBrowsers, port, 1)
    await waitFor('refused connections', () => (hammered.snapshot().errors.ECONNREFUSED ?? 0) >= 2 &&
      (browsed.snapshot().errors.ECONNREFUSED ?? 0) >= 1)
    t.equal(browsed.snapshot().gaveUp, 0, 'a network error is not a refusal: EventSource keeps trying')
  })
})

t.test('a restart: the clients of a full server come back to its successor on the same port', async (t) => {
  // Short retry: and drain so the four EventSources are back within the four counted seconds.
  const server = { name: 'tiny', setup: 'tower-sse' as const, options: { maxClients: 4, retryMs: 1000, drainMs: 400 }, summary: 'tiny' }
  const result = await runRestart({ server, population: 'browser', clients: 4, seconds: 4, settings: { hammerDelayMs: 50, stormRate: 10, maxSeconds: 40 } })
  t.equal(result.connectedBefore, 4, 'the server was full before the restart')
  t.equal(result.readmitted, 4, 'every client came back to the new server')
  t.equal(result.perSecond.length, 4, 'one count per second')
  t.equal(result.perSecond.reduce((sum, n) => sum + n, 0), 4, 'each client reconnected once')
  t.ok(Number.isFinite(result.closeMs) && result.closeMs >= 0, `the old server's close() was timed: ${result.closeMs} ms`)
  t.ok(result.busiestOverAverage >= 1 && result.busiestOverAverage <= result.spanSeconds, `busiest / average ${result.busiestOverAverage}`)
  t.match(restartTable([result]), /\| tiny \| browser \| 4 \/ 4 \| \d+ \| 4 \| [\d ]+ \| \d+ \/ [\d.]+ = [\d.]+× \|/)
  const verdicts = checkTargets([], [], [{ ...result, server: 'tower-sse' }])
  t.same(verdicts.filter((v) => v.target.includes('restart')).map((v) => [v.target, v.met]),
    [['tower-sse × browser restart: busiest second of reconnects ≤ 2× the average', result.busiestOverAverage <= 2]])
})
