import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { countTimeWait, socketsOn } from '../benchmarks/lib/time-wait'
import { narrowedRunProblem } from '../benchmarks/storm/namespace'
import { changedFiles } from '../benchmarks/storm/code-fingerprint'
import { parsePlan } from '../benchmarks/storm/plan'
import { Progress } from '../benchmarks/storm/progress'
import { stormMarkdown, type StormReport, type StormRow } from '../benchmarks/storm/report'
import { checkTargets } from '../benchmarks/storm/targets'
import { runStorm } from '../benchmarks/storm/storm'

// The storm harness, kept runnable with a handful of clients. No figure is asserted, only that
// every part measures something and the report carries it; plus the reproductions' behaviour.

t.test('the quick storm with tiny sizes writes well-formed rows, tables and a chart', async (t) => {
  const out = await mkdtemp(path.join(os.tmpdir(), 'storm-test-'))
  t.teardown(() => rm(out, { recursive: true, force: true }))
  // Three clients against a tower-sse preset with room for two: one server, so one server process to
  // start, whose tarpit holds a refusal 0.2 s rather than 5 (the refusal path would wait that out).
  // The reproductions' own behaviour is pinned in bench-storm-servers.test.ts.
  const plan = parsePlan([
    '--quick', '--preset', 'tiny={"maxClients":2,"storm":{"tarpitMs":200}}', '--servers', 'tiny', '--populations', 'hammer', '--clients', '3',
    '--warmup', '0', '--duration', '1', '--narrowed', '1', '--rejection', '1', '--rejection-connections', '2', '--out', out
  ])
  let progress = ''
  const { report, markdown } = await runStorm(plan, 'test', { write: (text) => { progress += text } })
  t.match(progress, /^\[1\/\d+ \d+:\d\d\] tiny × hammer, 3 clients$/m, 'prints a progress line per step')

  t.same(report.failures, [])
  t.same(report.rows.map((r) => [r.server, r.population, r.clients, r.capacity]), [['tiny', 'hammer', 3, 2]])
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

  t.same(report.rejection.map((r) => r.server), ['tiny'])
  const [refusals] = report.rejection
  t.ok(refusals.bare.requestsPerSec > 0 && Object.keys(refusals.bare.statusCodes).join() === '503', 'the bare route answered 503s')
  t.ok(Object.keys(refusals.statusCodes).every((status) => status === '503'), 'a full server only refuses')
  t.ok(Number.isFinite(refusals.throughputRatio), 'compared with its bare route')
  t.ok(report.targets.length > 0 && report.targets.every((check) => [true, false, null].includes(check.met)), 'every target has a verdict')

  t.equal(await readFile(path.join(out, 'storm.md'), 'utf8'), markdown)
  t.match(markdown, /\| server \| population \| clients \/ cap \| connects\/min \(server\)/)
  t.equal(markdown.split('\n').filter((line) => /^\| tiny \| hammer \| 3 \/ 2 \|/.test(line)).length, 1)
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
  const client = net.connect(port, '127.0.0.1')
  await new Promise((resolve) => client.once('connect', resolve))
  const clients = new Set([`${client.localAddress ?? ''}:${client.localPort ?? 0}`])
  client.end()
  await new Promise((resolve) => client.once('close', resolve))
  t.same(countTimeWait(port, { clients }), { client: 1, server: 0 }, 'the client closed first: its side holds the TIME_WAIT')

  const table = path.join(await mkdtemp(path.join(os.tmpdir(), 'tcp-table-')), 'tcp')
  t.teardown(() => rm(path.dirname(table), { recursive: true, force: true }))
  await writeFile(table, [
    '  sl  local_address rem_address   st tx_queue rx_queue',
    '   0: 0100007F:1068 0100007F:9C40 06 00000000:00000000',
    '   1: 0100007F:9C41 0100007F:1068 06 00000000:00000000',
    '   2: 0100007F:9C42 0100007F:1068 06 00000000:00000000',
    '   3: 0100007F:9C43 0100007F:1068 01 00000000:00000000',
    '   4: 0100007F:1069 0100007F:9C44 06 00000000:00000000',
    '   5: 0100007F:1068 0200007F:9C40 06 00000000:00000000',
    // Listed again, as a read racing other sockets' changes can list it.
    '   6: 0100007F:9C41 0100007F:1068 06 00000000:00000000'
  ].join('\n'))
  await writeFile(table + '6', [
    '  sl  local_address                         remote_address                        st',
    '   0: 0000000000000000FFFF00000100007F:1068 0000000000000000FFFF00000200007F:9C45 06',
    '   1: 00000000000000000000000001000000:9C46 00000000000000000000000001000000:1068 06'
  ].join('\n'))
  t.same(countTimeWait(4200, { tables: [table, table + '-absent'] }), { client: 2, server: 2 })
  t.same(countTimeWait(4200, { tables: [table, table + '6'] }), { client: 3, server: 3 })
  // Only the given client endpoints, address and port: 127.0.0.1:40001 and 127.0.0.1:40000 (0x9C41, 0x9C40),
  // not 127.0.0.2:40000 on another address with the same port; an IPv4-mapped address reads as IPv4.
  t.same(countTimeWait(4200, { tables: [table], clients: new Set(['127.0.0.1:40000', '127.0.0.1:40001']) }), { client: 1, server: 1 })
  t.same(countTimeWait(4200, { tables: [table, table + '6'], clients: new Set(['127.0.0.2:40005']) }), { client: 0, server: 1 })
  t.same(countTimeWait(4200, { tables: [table], clients: new Set(['127.0.0.1:40004']) }), { client: 0, server: 0 })
  t.same(socketsOn(4200, { tables: [table], clients: new Set(['127.0.0.1:40003']) }), [{ side: 'client', state: 'ESTABLISHED', client: '127.0.0.1:40003' }], 'every state, by name')
  t.throws(() => countTimeWait(0), /port must be an integer 1-65535/)
})
