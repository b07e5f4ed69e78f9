import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import Fastify from 'fastify'
import t from 'tap'
import { countTimeWait } from '../benchmarks/lib/time-wait'
import { narrowedRunProblem } from '../benchmarks/storm/namespace'
import { changedFiles } from '../benchmarks/storm/code-fingerprint'
import { parsePlan } from '../benchmarks/storm/plan'
import { Progress } from '../benchmarks/storm/progress'
import { restartTable, stormMarkdown, type StormReport, type StormRow } from '../benchmarks/storm/report'
import { checkTargets } from '../benchmarks/storm/targets'
import type { ServerSetup, StreamCounts } from '../benchmarks/storm/servers/contract'
import { setupBare503 } from '../benchmarks/storm/servers/bare-503'
import { LEGACY_MAX_CLIENTS, setupLegacy } from '../benchmarks/storm/servers/legacy'
import { setupTowerSse } from '../benchmarks/storm/servers/tower-sse'
import { setupUpstreamFix, UPSTREAM_MAX_CLIENTS } from '../benchmarks/storm/servers/upstream-fix'
import { runRestart } from '../benchmarks/storm/restart'
import { runStorm } from '../benchmarks/storm/storm'
import type { PopulationSettings, PopulationStart } from '../benchmarks/storm/populations/contract'
import { ClientCounters } from '../benchmarks/storm/populations/counters'
import { startAutocannon } from '../benchmarks/storm/populations/autocannon'
import { startBackoffClients } from '../benchmarks/storm/populations/backoff'
import { startBrowsers } from '../benchmarks/storm/populations/browser'
import { startTowerSseClients } from '../benchmarks/storm/populations/client'
import { startDashboards } from '../benchmarks/storm/populations/dashboard'
import { startHammers } from '../benchmarks/storm/populations/hammer'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

// The storm harness, kept runnable with a handful of clients. No figure is asserted, only that
// every part measures something and the report carries it; plus the reproductions' behaviour.

t.test('the quick storm with tiny sizes writes well-formed rows, tables and a chart', async (t) => {
  const out = await mkdtemp(path.join(os.tmpdir(), 'storm-test-'))
  t.teardown(() => rm(out, { recursive: true, force: true }))
  // Three clients against legacy (cap 50) and a tower-sse preset with room for two.
  const plan = parsePlan([
    '--quick', '--preset', 'tiny={"maxClients":2}', '--servers', 'legacy,tiny', '--populations', 'hammer', '--clients', '3',
    '--warmup', '0', '--duration', '1', '--narrowed', '1', '--rejection', '1', '--rejection-connections', '2', '--out', out
  ])
  let progress = ''
  const { report, markdown } = await runStorm(plan, 'test', { write: (text) => { progress += text } })
  t.match(progress, /^\[1\/\d+ \d+:\d\d\] legacy × hammer, 3 clients$/m, 'prints a progress line per step')

  t.same(report.failures, [])
  t.same(report.rows.map((r) => [r.server, r.population, r.clients, r.capacity]), [['legacy', 'hammer', 3, 50], ['tiny', 'hammer', 3, 2]])
  const narrowed = narrowedRunProblem() === null
  for (const row of report.rows) {
    for (const field of ['connectsPerMin', 'clientTimeWait', 'serverTimeWait', 'logLines', 'rssMB'] as const) {
      t.ok(Number.isFinite(row[field]) && row[field] >= 0, `${row.server}: ${field} is a count (${row[field]})`)
    }
    t.ok(row.rssMB > 0, `${row.server}: the server reported its RSS`)
    t.equal(row.timeline.length, 1, `${row.server}: one timeline point per second`)
    if (narrowed) t.ok(Number.isInteger(row.eaddrnotavail), `${row.server}: the narrowed run counted EADDRNOTAVAIL`)
    else t.equal(row.eaddrnotavail, null, `${row.server}: narrowed run skipped`)
  }
  t.ok(report.rows[0].logLines >= 3, 'legacy logged each of the three connects')

  t.same(report.rejection.map((r) => r.server), ['tiny'])
  const [refusals] = report.rejection
  t.ok(refusals.bare.requestsPerSec > 0 && Object.keys(refusals.bare.statusCodes).join() === '503', 'the bare route answered 503s')
  t.ok(Object.keys(refusals.statusCodes).every((status) => status === '503'), 'a full server only refuses')
  t.ok(Number.isFinite(refusals.throughputRatio), 'compared with its bare route')
  t.ok(report.targets.length > 0 && report.targets.every((check) => [true, false, null].includes(check.met)), 'every target has a verdict')

  t.equal(await readFile(path.join(out, 'storm.md'), 'utf8'), markdown)
  t.match(markdown, /\| server \| population \| clients \/ cap \| connects\/min \(server\)/)
  t.equal(markdown.split('\n').filter((line) => /^\| (legacy|tiny) \| hammer \| 3 \/ (50|2) \|/.test(line)).length, 2)
  t.same(JSON.parse(await readFile(path.join(out, 'storm.json'), 'utf8')), JSON.parse(JSON.stringify(report)))
  const svg = await readFile(path.join(out, 'storm.svg'), 'utf8')
  t.match(svg, /^<svg[^>]*>/, 'the chart is an SVG document')
  t.match(svg, />tiny</, 'the chart names every server')
})

t.test('a --quick run never writes over the committed full results', async (t) => {
  const results = path.resolve(__dirname, '..', 'benchmarks', 'results')
  t.equal(parsePlan([]).outDir, results, 'a full run writes benchmarks/results')
  t.equal(parsePlan(['--quick']).outDir, path.join(results, 'tmp'), 'a quick run its tmp/ (ignored by git)')
  t.equal(parsePlan(['--quick', '--out', '/tmp/elsewhere']).outDir, '/tmp/elsewhere', '--out still decides')
})

t.test('bad command lines are refused with the option named', async (t) => {
  t.throws(() => parsePlan(['--servers', 'legacy,nope']), /--servers: unknown "nope"/)
  t.throws(() => parsePlan(['--duration', '0']), /--duration must be an integer >= 1/)
  t.throws(() => parsePlan(['--clients-per-cap', 'x']), /--clients-per-cap must be a number > 0/)
  t.throws(() => parsePlan(['--preset', 'tower-sse={}']), /a server named "tower-sse" already exists/)
  t.throws(() => parsePlan(['--preset', 'big={maxClients:4}']), /--preset big: options are not JSON/)
  t.throws(() => parsePlan(['--preset', 'big=[1]']), /--preset big: options must be a JSON object/)
  t.throws(() => parsePlan(['--bogus']), /Unknown option '--bogus'/)
  const plan = parsePlan(['--preset', 'big={"maxClients":400}', '--servers', 'big'])
  t.same(plan.servers.map((s) => [s.name, s.options]), [['big', { maxClients: 400 }]])
  const refused = parsePlan(['--preset', 'odd={"maxClients":-1}', '--servers', 'odd'])
  t.same(refused.servers, [])
  t.match(refused.skipped, [{ server: 'odd', reason: /maxClients/ }], 'a preset the plugin refuses is skipped with its reason')

  // The command itself: usage on a bad value, exit code 2.
  const entry = path.join(__dirname, '..', 'benchmarks', 'storm', 'run.ts')
  const child = spawn(process.execPath, [...process.execArgv, entry, '--warmup', 'soon'], { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise((resolve) => child.once('close', resolve))
  t.equal(code, 2)
  t.match(stderr, /--warmup must be an integer >= 0, got "soon"\n\nnpm run bench:storm -- \[options\]/)
})

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

const SETTINGS: PopulationSettings = { hammerDelayMs: 50, stormRate: 40, maxSeconds: 30 }

/** Starts `size` clients of a population against `port`, stopped when the test ends. */
function populate (t: tap.Test, start: PopulationStart, port: number, size: number): ClientCounters {
  const counters = new ClientCounters()
  const population = start(`http://127.0.0.1:${port}/api/events`, size, counters, SETTINGS)
  t.teardown(() => population.close())
  return counters
}

t.test('populations react to a stream and a refusal as their clients do', async (t) => {
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
    await waitFor('the first retry to be refused', () => counters.snapshot().refused === 2, 4000)
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
    const server = net.createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const port = (server.address() as net.AddressInfo).port
    await new Promise((resolve) => server.close(resolve))
    const hammered = populate(t, startHammers, port, 1)
    const browsed = populate(t, startBrowsers, port, 1)
    await waitFor('refused connections', () => (hammered.snapshot().errors.ECONNREFUSED ?? 0) >= 2 &&
      (browsed.snapshot().errors.ECONNREFUSED ?? 0) >= 1)
    t.equal(browsed.snapshot().gaveUp, 0, 'a network error is not a refusal: EventSource keeps trying')
  })
})

/** A matrix row with every count at zero but those given. */
function row (server: string, population: StormRow['population'], counts: Partial<StormRow> = {}): StormRow {
  return {
    server,
    population,
    clients: 4,
    capacity: 2,
    windowSeconds: 1,
    connectsPerMin: 0,
    clientConnectsPerMin: 0,
    tcpConnectsPerMin: 0,
    admitted: 0,
    rejected: 0,
    evicted: 0,
    expired: 0,
    clientTimeWait: 0,
    clientTimeWaitEnd: 0,
    serverTimeWait: 0,
    serverTimeWaitEnd: 0,
    clientErrors: {},
    gaveUp: 0,
    logLines: 0,
    logLinesPer30s: 0,
    rssMB: 1,
    elu: 0,
    timeline: [0],
    eaddrnotavail: 0,
    narrowedConnectsPerMin: 0,
    narrowedError: null,
    ...counts
  }
}

t.test('targets are judged against legacy in the same run, and unmeasured ones say so', async (t) => {
  const rows = [
    row('legacy', 'hammer', { connectsPerMin: 54_000, clientTimeWait: 10_000, eaddrnotavail: 3000 }),
    row('legacy', 'browser', { connectsPerMin: 1000, clientTimeWait: 400 }),
    row('tower-sse', 'browser', { connectsPerMin: 10, clientTimeWait: 5, logLinesPer30s: 1 }),
    row('tower-sse', 'dashboard', { connectsPerMin: 3000, eaddrnotavail: null, narrowedError: 'no reply to "stats"', logLinesPer30s: 2 })
  ]
  const bare = { requestsPerSec: 1000, p99Ms: 2, statusCodes: { 503: 1000 }, errors: 0 }
  const rejection = [{ server: 'tower-sse', requestsPerSec: 850, p99Ms: 2, statusCodes: { 503: 850 }, errors: 0, bare, throughputRatio: 0.85, p99Ratio: 1 }]
  const verdicts = Object.fromEntries(checkTargets(rows, rejection).map((check) => [check.target, check.met]))
  t.match(verdicts, {
    'legacy × hammer: ≥ 49,000 connects/min': true,
    'legacy × hammer: thousands of client-side TIME_WAIT': true,
    'legacy × hammer: EADDRNOTAVAIL in the narrowed range': true,
    'tower-sse × browser: ≤ 1% of legacy\'s connects/min': true,
    'tower-sse × browser: client TIME_WAIT ≤ 1% of legacy\'s': false,
    'tower-sse × browser: zero EADDRNOTAVAIL': true,
    'tower-sse × browser: ≤ 1 log line per 30 s': true,
    'tower-sse × dashboard: ≤ 1% of legacy\'s connects/min': null,
    'tower-sse × dashboard: zero EADDRNOTAVAIL': null,
    'tower-sse × dashboard: ≤ 1 log line per 30 s': false,
    'tower-sse × backoff: ≤ 1 log line per 30 s': null,
    'tower-sse: refusals within 10% of the bare 503 route\'s throughput': false
  })

  const report: StormReport = {
    generatedAt: 'now',
    command: 'npm run bench:storm',
    environment: { node: 'v20', cpus: 2, platform: 'linux' },
    settings: { ...parsePlan(['--quick']), clients: null },
    servers: [],
    skipped: [{ server: 'tower-sse-retry', reason: 'option "rejectWith" is unknown' }],
    narrowedSkippedBecause: 'unshare: not permitted',
    rows,
    rejection: [],
    restart: [],
    targets: checkTargets(rows, []),
    failures: [{ what: 'legacy × client', error: 'server exited' }],
    warnings: ['1 module file(s) changed while the benchmark ran']
  }
  const markdown = stormMarkdown(report)
  t.match(markdown, /--quick: smoke run/)
  t.match(markdown, /the narrowed-port runs were skipped: unshare: not permitted/)
  t.match(markdown, /\| tower-sse \| dashboard \| 4 \/ 2 \| 3,000 \|.*\| failed \|/)
  t.match(markdown, /## Warnings, skipped and failed\n\n- WARNING: 1 module file\(s\) changed while the benchmark ran\n- server tower-sse-retry skipped: option "rejectWith" is unknown\n/)
  t.match(markdown, /- narrowed run of tower-sse × dashboard failed: no reply to "stats"\n- FAILED legacy × client: server exited/)
  t.notMatch(markdown, /## Refusal path/, 'no refusal table without measurements')
  t.notMatch(markdown, /## Restart/, 'no restart table without measurements')
})

t.test('a module rewritten, added or removed during a run is noticed', async (t) => {
  const before = new Map([['a.js', '10:1'], ['b.js', '10:1'], ['c.js', '10:1']])
  const after = new Map([['a.js', '12:2'], ['c.js', '10:1'], ['d.js', '10:3']])
  t.same(changedFiles(before, after), ['a.js', 'b.js', 'd.js'])
  t.same(changedFiles(before, new Map(before)), [])
})

t.test('on a terminal the progress line is rewritten in place', async (t) => {
  let written = ''
  const progress = new Progress(2, { isTTY: true, write: (text) => { written += text } })
  progress.next('legacy × hammer')
  progress.detail('3/20 s')
  progress.note('skipping something')
  progress.finish()
  // eslint-disable-next-line no-control-regex -- the progress line is drawn with ESC [K
  t.match(written, /^\r\x1b\[K\[1\/2 0:0\d\] legacy × hammer\r\x1b\[K\[1\/2 0:0\d\] legacy × hammer 3\/20 s\r\x1b\[Kskipping something\n/)
  t.ok(written.endsWith('\r\x1b[K'), 'the line is cleared at the end')
})

t.test('TIME_WAIT is counted on the side that closed first', async (t) => {
  const server = net.createServer((socket) => socket.resume())
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const port = (server.address() as net.AddressInfo).port
  const before = countTimeWait(port)
  const client = net.connect(port, '127.0.0.1')
  await new Promise((resolve) => client.once('connect', resolve))
  client.end()
  await new Promise((resolve) => client.once('close', resolve))
  t.equal(countTimeWait(port).client, before.client + 1, 'the client closed first: its side holds the TIME_WAIT')
  t.equal(countTimeWait(port).server, before.server)

  const table = path.join(await mkdtemp(path.join(os.tmpdir(), 'tcp-table-')), 'tcp')
  t.teardown(() => rm(path.dirname(table), { recursive: true, force: true }))
  await writeFile(table, [
    '  sl  local_address rem_address   st tx_queue rx_queue',
    '   0: 0100007F:1068 0100007F:9C40 06 00000000:00000000',
    '   1: 0100007F:9C41 0100007F:1068 06 00000000:00000000',
    '   2: 0100007F:9C42 0100007F:1068 06 00000000:00000000',
    '   3: 0100007F:9C43 0100007F:1068 01 00000000:00000000',
    '   4: 0100007F:1069 0100007F:9C44 06 00000000:00000000'
  ].join('\n'))
  t.same(countTimeWait(4200, [table, table + '6-absent']), { client: 2, server: 1 })
  t.throws(() => countTimeWait(0), /port must be an integer 1-65535/)
})

t.test('a restart: the clients of a full server come back to its successor on the same port', async (t) => {
  // Short retry: and drain so the four EventSources are back within the four counted seconds.
  const server = { name: 'tiny', setup: 'tower-sse' as const, options: { maxClients: 4, retryMs: 1000, retryJitterMs: 400, drainMs: 400 }, summary: 'tiny' }
  const result = await runRestart({ server, population: 'browser', clients: 4, seconds: 4, settings: { hammerDelayMs: 50, stormRate: 10, maxSeconds: 40 } })
  t.equal(result.connectedBefore, 4, 'the server was full before the restart')
  t.equal(result.readmitted, 4, 'every client came back to the new server')
  t.equal(result.perSecond.length, 4, 'one count per second')
  t.equal(result.perSecond.reduce((sum, n) => sum + n, 0), 4, 'each client reconnected once')
  t.ok(result.closeMs >= 0 && result.closeMs < 5000, `the old server closed in ${result.closeMs} ms`)
  t.ok(result.busiestOverAverage >= 1 && result.busiestOverAverage <= result.spanSeconds, `busiest / average ${result.busiestOverAverage}`)
  t.match(restartTable([result]), /\| tiny \| browser \| 4 \/ 4 \| \d+ \| 4 \| [\d ]+ \| \d+ \/ [\d.]+ = [\d.]+× \|/)
  const verdicts = checkTargets([], [], [{ ...result, server: 'tower-sse' }])
  t.same(verdicts.filter((v) => v.target.includes('restart')).map((v) => [v.target, v.met]),
    [['tower-sse × browser restart: busiest second of reconnects ≤ 2× the average', result.busiestOverAverage <= 2]])
})
