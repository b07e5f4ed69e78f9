import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { createParser } from 'eventsource-parser'
import t from 'tap'
import { Histogram } from '../benchmarks/lib/histogram'
import { IpcClient } from '../benchmarks/lib/ipc'
import { markdownTable } from '../benchmarks/lib/markdown-table'
import { spawnSibling } from '../benchmarks/lib/spawn-sibling'
import type { CaseResult } from '../benchmarks/fanout/case'
import { shares } from '../benchmarks/lib/fanout/rig'
import { CONTENDER_NAMES, CONTENDERS } from '../benchmarks/lib/fanout/contenders'
import { STREAM_PATH } from '../benchmarks/lib/fanout/contenders/contender'
import { areaOf, shortUrl } from '../benchmarks/fanout/cpu-profile'
import { benchEvent, EVENT_FRAME_BYTES, STAMP_MARKER } from '../benchmarks/lib/fanout/payload'
import { FULL_PLAN, parseArgs, QUICK_PLAN, type FanoutPlan } from '../benchmarks/fanout/plan'
import { backToBackRounds, fanoutMarkdown, isBurstRow, RATIO_FIELDS, writeFanoutReport, type FanoutResults, type FanoutRow } from '../benchmarks/fanout/report'
import { combineRounds, median } from '../benchmarks/lib/fanout/rounds'
import { runFanout } from '../benchmarks/fanout/run'
import { StampScanner } from '../benchmarks/lib/fanout/stamp-scanner'
import { connect, waitFor } from './fixtures/sse-connection'

// The harness itself, kept runnable with a handful of streams. No figure is asserted: only
// that every part measures something real and the report carries it.

t.test('the stamp scanner finds what eventsource-parser finds, however the bytes are split', async (t) => {
  const events = [benchEvent(0), benchEvent(1), benchEvent(2)]
  const frames = events.map((event, i) => `${i === 1 ? 'id: 1\nevent: message\n' : ''}data: ${JSON.stringify(event)}\n\n`)
  const expected = events.map((e) => e.t)

  const parsed: number[] = []
  const parser = createParser({ onEvent: (event) => parsed.push((JSON.parse(event.data) as { t: number }).t) })
  parser.feed(frames.join(''))
  t.same(parsed, expected, 'eventsource-parser reads these stamps from the stream')

  // The same frames in a chunked HTTP body, as node:http writes them: hex size line, frame, CRLF.
  const body = frames.map((frame) => `${Buffer.byteLength(frame).toString(16)}\r\n${frame}\r\n`).join('')
  const bytes = Buffer.from(body, 'latin1')
  for (let cut = 1; cut < bytes.length; cut++) {
    const found: number[] = []
    const scanner = new StampScanner()
    scanner.scan(bytes.subarray(0, cut), (stamp) => found.push(stamp))
    scanner.scan(bytes.subarray(cut), (stamp) => found.push(stamp))
    if (found.join() !== expected.join()) t.fail(`split at byte ${cut} found ${found.join()}`)
  }
  const byteByByte: number[] = []
  const scanner = new StampScanner()
  for (let i = 0; i < bytes.length; i++) scanner.scan(bytes.subarray(i, i + 1), (stamp) => byteByByte.push(stamp))
  t.same(byteByByte, expected, 'one byte at a time')
})

t.test('the benchmark event is about 150 bytes on the wire and starts with its stamp', async (t) => {
  const event = benchEvent(42)
  const frame = `data: ${JSON.stringify(event)}\n\n`
  t.equal(Buffer.byteLength(frame), EVENT_FRAME_BYTES)
  t.ok(JSON.stringify(event).startsWith(STAMP_MARKER))
  t.equal(event.s, 42)
})

t.test('histogram quantiles are within 1% and merge across processes', async (t) => {
  const whole = new Histogram()
  const halves = [new Histogram(), new Histogram()]
  for (let v = 1; v <= 10_000; v++) {
    whole.record(v)
    halves[v % 2].record(v)
  }
  const merged = new Histogram()
  for (const half of halves) merged.merge(JSON.parse(JSON.stringify(half)))
  for (const [q, exact] of [[0.5, 5000], [0.99, 9900], [1, 10_000]]) {
    t.ok(Math.abs(whole.quantile(q) - exact) <= exact * 0.01, `q${q} ≈ ${exact} (got ${whole.quantile(q)})`)
    t.equal(merged.quantile(q), whole.quantile(q), `merged q${q}`)
  }
  t.equal(merged.count, 10_000)
  t.equal(merged.max, 10_000)
  t.ok(Number.isNaN(new Histogram().quantile(0.5)), 'no samples, no quantile')
  t.throws(() => whole.record(-1), /finite number >= 0, got -1/)
  t.throws(() => whole.quantile(0), /quantile must be in \(0, 1\], got 0/)
})

t.test('every contender serves real SSE events that eventsource-parser reads', async (t) => {
  for (const name of CONTENDER_NAMES) {
    const server = await CONTENDERS[name]({ maxClients: 10 })
    const streams = [
      await connect(server.port, STREAM_PATH, { accept: 'text/event-stream' }),
      await connect(server.port, STREAM_PATH, { accept: 'text/event-stream' })
    ]
    await waitFor(`${name} to count 2 streams`, () => server.size() === 2)
    const event = benchEvent(7)
    server.broadcast(event)
    for (const stream of streams) {
      t.equal(stream.status, 200, `${name}: 200`)
      t.match(stream.headers['content-type'], /^text\/event-stream/, `${name}: content type`)
      await waitFor(`${name} to deliver the event`, () => stream.events.some((e) => e.data.startsWith(STAMP_MARKER)))
      const delivered = stream.events.find((e) => e.data.startsWith(STAMP_MARKER))
      t.same(JSON.parse(delivered?.data ?? ''), event, `${name}: the event arrives whole`)
    }
    streams[0].destroy()
    await waitFor(`${name} to forget a closed stream`, () => server.size() === 1)
    await server.close()
  }
})

t.test('the command line picks the plan and names what it refuses', async (t) => {
  t.same(parseArgs([]).plan, FULL_PLAN)
  t.same(parseArgs(['--quick']).plan, QUICK_PLAN)
  t.same([parseArgs([]).help, parseArgs(['--help']).help, parseArgs(['-h']).help], [false, true, true], '--help asks for the usage only')
  const custom = parseArgs(['--quick', '--profile', '--rounds=2', '--clients=5,50', '--contenders=raw,tower-sse', '--bursts=1,5', '--burst-from=loop', '--out=/tmp/x'])
  t.equal(custom.plan.rounds, 2)
  t.same(custom.plan.burst, { ...QUICK_PLAN.burst, sizes: [1, 5], from: 'loop' })
  t.same(QUICK_PLAN.burst.sizes, [1, 10, 50], 'the quick plan is not changed by a run that filters it')
  t.throws(() => parseArgs(['--burst-from=timer']), /malformed argument "--burst-from=timer"/)
  t.throws(() => parseArgs(['--bursts=0']), /--bursts must be a comma-separated list of positive integers, got "0"/)
  t.throws(() => parseArgs(['--rounds=0']), /malformed argument "--rounds=0"/)
  t.same(custom.plan.clients, [5, 50])
  t.same(custom.plan.contenders, ['raw', 'tower-sse'])
  t.equal(custom.plan.profile, true)
  t.equal(custom.outDir, '/tmp/x')
  t.equal(custom.render, false)
  t.equal(parseArgs(['--render']).render, true)
  t.throws(() => parseArgs(['--clients=10,zero']), /--clients must be a comma-separated list of positive integers, got "10,zero"/)
  t.throws(() => parseArgs(['--contenders=raw,socket.io']), /unknown contender "socket.io"; known: raw, tower-sse/)
  t.throws(() => parseArgs(['--fast']), /unknown or malformed argument "--fast"/)

  const cli = spawnSync(process.execPath, [...process.execArgv, path.join(__dirname, '../benchmarks/fanout/run.ts'), '--fast'], { encoding: 'utf8' })
  t.equal(cli.status, 1, 'the command exits 1 on a bad argument')
  t.match(cli.stderr, /\[fanout\] unknown or malformed argument "--fast"\nusage: run \[--help\] \[--quick\]/)
})

t.test('rounds combine into medians; delivery keeps its worst round', async (t) => {
  const round = (p99Ms: number, deliveredPct: number): CaseResult => ({ contender: 'raw', clients: 10, p99Ms, deliveredPct } as unknown as CaseResult)
  const combined = combineRounds([round(9, 100), round(1, 99.5), round(4, 100)])
  t.equal(combined.p99Ms, 4)
  t.equal(combined.deliveredPct, 99.5)
  t.equal(combined.contender, 'raw')
  t.equal(median([4, 1, 3, 2]), 2.5)
  t.throws(() => combineRounds([]), /no rounds to combine/)
  t.throws(() => median([]), /median of no values/)
})

t.test('back-to-back figures round by round, each against the raw loop of its own round', async (t) => {
  const row = (contender: string, fastP99Ms: number, eventsPerSec: number): CaseResult => ({ contender, clients: 10, fastP99Ms, eventsPerSec } as unknown as CaseResult)
  const rounds = backToBackRounds([
    { round: 1, row: row('raw', 10, 100) }, { round: 2, row: row('raw', 40, 50) },
    { round: 1, row: row('tower-sse', 5, 150) }, { round: 2, row: row('tower-sse', 44, 60) }
  ])
  t.same(rounds.filter((r) => r.contender === 'tower-sse').map((r) => [r.round, r.ratios.fastP99Ms, r.ratios.eventsPerSec]), [[1, 0.5, 1.5], [2, 1.1, 1.2]])
  const results = { finishedAt: '2026-12-03T00:00:00.000Z', plan: { ...QUICK_PLAN, rounds: 2 }, rows: [], backToBackRounds: rounds, environment: { node: 'v20', platform: 'linux', cpu: 'x', cores: 2, versions: {} } } as unknown as FanoutResults
  t.match(fanoutMarkdown(results), /\| tower-sse \| 10 \| 5\.00 \(×0\.50\) \| 44\.00 \(×1\.10\) \| 150\.0 \(×1\.50\) \| 60\.0 \(×1\.20\) \|/, 'each round\'s column, in round order')
  t.notMatch(fanoutMarkdown({ ...results, plan: { ...QUICK_PLAN, rounds: 1 } }), /round by round/, 'a one-round run has nothing to add to its medians')
})

t.test('small shared helpers', async (t) => {
  t.same(shares(10, 3), [4, 3, 3], 'streams spread over client processes')
  t.same(shares(5, 1), [5])
  t.equal(markdownTable(['a', 'b'], [['1', 'x|y']], ['left', 'right']), '| a | b |\n| --- | ---: |\n| 1 | x\\|y |\n')
  t.throws(() => markdownTable(['a', 'b'], [['1']]), /row 0 has 1 cells, the header has 2/)
  t.equal(shortUrl('file:///work/main/node_modules/fastify/lib/reply.js'), 'fastify/lib/reply.js')
  t.equal(shortUrl('file:///work/main/build/lib/registry.js'), 'lib/registry.js')
  t.equal(areaOf('file:///x/node_modules/@fastify/sse/index.js'), '@fastify/sse')
  t.equal(areaOf('node:net'), 'node core')
  t.equal(areaOf('file:///repo/lib/registry.js'), 'lib')
})

t.test('a child process answers requests, refuses unknown ones by name, and exits with its runner', async (t) => {
  const server = new IpcClient(spawnSibling(path.join(__dirname, '../benchmarks/lib/fanout/rig.ts'), 'server'), 'test server')
  await t.rejects(server.request({ type: 'size' }, 10_000), /test server: no contender started yet/)
  await t.rejects(server.request({ type: 'launch' }, 10_000), /unknown request "launch"; known: start, size/)
  await t.rejects(server.request({ type: 'start', contender: 'nginx', maxClients: 1 }, 10_000), /unknown contender "nginx"/)
  await t.rejects(server.request({ type: 'memory' }, 10_000), /--expose-gc/, 'memory needs a collectable heap')
  await server.exit()
  await t.rejects(server.request({ type: 'size' }, 10_000), /test server exited/)
})

t.test('the whole run, tiny: two contenders, two client processes, report and profile', async (t) => {
  const plan: FanoutPlan = {
    ...QUICK_PLAN,
    contenders: ['raw', 'tower-sse'],
    clients: [12],
    streamsPerProcess: 6,
    settleMs: 0,
    warmupDeliveries: 24,
    steady: { deliveriesPerSec: 600, events: 3 },
    fast: { maxEvents: 5, maxMs: 2000 },
    burst: { sizes: [1, 4], maxEvents: 8, maxMs: 2000, from: 'callbacks' },
    profile: true
  }
  const dir = t.testdir()
  const lines: string[] = []
  const results = await runFanout(plan, (line) => lines.push(line), dir)
  const steady = results.rows.filter((row): row is FanoutRow => !isBurstRow(row))
  const bursts = results.rows.filter(isBurstRow)
  t.equal(steady.length, 2)
  t.same(bursts.map((b) => `${b.contender} ${b.burst}`), ['raw 1', 'raw 4', 'tower-sse 1', 'tower-sse 4'], 'one burst row per contender and burst size')
  for (const row of bursts) {
    t.equal(row.deliveredPct, 100, `${row.contender} bursts of ${row.burst}: every event reached every stream`)
    t.equal(row.events, 8, 'whole bursts up to maxEvents')
    t.ok(row.deliveriesPerSec > 0 && row.p99Ms > 0 && row.serverCpuUsPerDelivery > 0, `${row.contender} bursts of ${row.burst} measured`)
    if (row.contender === 'raw') t.equal(row.ratios.deliveriesPerSec, 1, 'raw is its own baseline per burst size')
  }
  for (const row of steady) {
    t.equal(row.clients, 12)
    t.equal(row.clientProcesses, 2)
    t.equal(row.deliveredPct, 100, `${row.contender}: every event reached every stream`)
    t.equal(row.fastEvents, 5)
    for (const field of ['broadcastMs', 'p50Ms', 'p99Ms', 'eventsPerSec', 'connectsPerSec'] as const) {
      t.ok(row[field] > 0, `${row.contender}: ${field} measured (${row[field]})`)
    }
    t.ok(Number.isFinite(row.rssPerClientKB) && Number.isFinite(row.heapPerClientKB), 'memory per stream read')
  }
  const raw = steady.find((r) => r.contender === 'raw')
  for (const field of RATIO_FIELDS) t.equal(raw?.ratios[field], raw?.[field] === 0 ? null : 1, `raw is its own baseline for ${field}`)
  t.ok(lines.some((l) => l.startsWith('top frames by self time')), 'the profile was summarised')
  t.ok(existsSync(path.join(dir, 'fanout-tower-sse-12.cpuprofile')), 'the profile was written where asked')
  t.ok(existsSync(path.join(dir, 'fanout-raw-12.cpuprofile')), 'and the raw loop\'s, to read its shares against')

  const markdown = await writeFanoutReport(dir, results)
  t.match(markdown, /\| tower-sse \| 12 \|/)
  t.match(markdown, /\(×\d+\.\d\d\)/, 'figures carry their ratio to raw')
  const json = JSON.parse(readFileSync(path.join(dir, 'fanout.json'), 'utf8'))
  t.same(Object.keys(json.rows[0]).filter((k) => ['contender', 'clients', 'broadcastMs', 'p50Ms', 'p99Ms', 'eventsPerSec', 'rssPerClientKB', 'heapPerClientKB'].includes(k)).length, 8)
  t.notOk('burst' in json.rows[0], 'a steady row has no burst')
  t.match(json.rows[2], { contender: 'raw', clients: 12, burst: 1, deliveriesPerSec: Number }, 'a burst row')
  t.match(markdown, /\| tower-sse \| 12 \| 4 \| [\d,]+ \(×\d+\.\d\d\) \|/, 'the burst table')
  t.equal(readFileSync(path.join(dir, 'fanout.md'), 'utf8'), markdown)
  t.match(readFileSync(path.join(dir, 'fanout.svg'), 'utf8'), /^<svg[^>]*>[\s\S]*p99[\s\S]*tower-sse[\s\S]*events per burst/)

  const rendered = spawnSync(process.execPath, [...process.execArgv, path.join(__dirname, '../benchmarks/fanout/run.ts'), '--render', `--out=${dir}`], { encoding: 'utf8' })
  t.equal(rendered.status, 0, 'the table and chart can be redrawn from the JSON alone')
  t.equal(rendered.stdout, markdown)
})
