import { mkdtemp, readFile, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { startRedis } from '../benchmarks/lib/redis-server'
import type { Mark } from '../benchmarks/bus/instance'
import { ClosedLoop, dueBy, FrameCounter, openLoop, scheduledAt } from '../benchmarks/bus/loops'
import { FULL_PLAN, parseArgs, QUICK_PLAN, setupsOf } from '../benchmarks/bus/plan'
import { busTargets, capacityFigures, latencyFigures, shareOfMemory, writeBusReport, type BusResults, type BusRow, type LatencyFigures, type WindowEnd } from '../benchmarks/bus/report'
import { runBus } from '../benchmarks/bus/run'

// bench:bus's own logic on synthetic figures, and the bench itself kept runnable at a tiny size on
// a real redis-server. No speed is asserted: only that every case measures something real and the
// report judges the targets on it.

t.test('plans and arguments: the cases users decide on by default, filters that say what they narrow, errors that name the argument', async (t) => {
  t.same([FULL_PLAN.buses, FULL_PLAN.instances, FULL_PLAN.streams, FULL_PLAN.bytes, FULL_PLAN.fractions], [['memory', 'redis'], [1, 2, 4], [10, 1000], [100, 4096], [0.25, 0.5, 0.75]])
  t.same(setupsOf(FULL_PLAN), [{ bus: 'memory', instances: 1 }, { bus: 'redis', instances: 1 }, { bus: 'redis', instances: 2 }, { bus: 'redis', instances: 4 }], 'the memory baseline first, one instance')
  t.same(setupsOf({ buses: ['redis'], instances: [2] }), [{ bus: 'redis', instances: 2 }])
  t.equal(parseArgs(['--quick']).plan.name, 'quick')
  t.same(parseArgs(['--quick']).plan.streams, QUICK_PLAN.streams, 'the quick run keeps the cases, shortens the windows')
  t.ok(QUICK_PLAN.measureMs < FULL_PLAN.measureMs && QUICK_PLAN.latencyMs < FULL_PLAN.latencyMs)
  t.equal(parseArgs([]).targeted, false)
  const narrow = parseArgs(['--buses=redis', '--instances=2', '--streams=50', '--bytes=200', '--fractions=0.5', '--in-flight=8', '--measure-ms=100', '--latency-ms=300', '--out=/tmp/x'])
  t.same([narrow.plan.buses, narrow.plan.instances, narrow.plan.streams, narrow.plan.bytes, narrow.plan.fractions, narrow.plan.inFlight, narrow.plan.measureMs, narrow.plan.latencyMs, narrow.outDir, narrow.targeted],
    [['redis'], [2], [50], [200], [0.5], 8, 100, 300, '/tmp/x', true])
  t.equal(parseArgs(['--out=/tmp/x']).targeted, false, 'only where it goes: still the whole plan')
  t.same([parseArgs(['--cpu-prof']).cpuProfile, parseArgs(['--cpu-prof']).targeted], [true, false], 'a profiled run is still the whole plan')
  t.throws(() => parseArgs(['--buses=nats']), /--buses: unknown bus "nats"; known: memory, redis/)
  t.throws(() => parseArgs(['--fractions=0.5,1']), /--fractions takes comma-separated shares of capacity between 0 and 1/)
  t.throws(() => parseArgs(['--streams=0']), /--streams takes comma-separated integers 1-5000, got "0"/)
  t.throws(() => parseArgs(['--modes=batched']), /unknown or malformed argument "--modes=batched"/, 'batched and unbatched modes are gone')
})

t.test('the open loop\'s schedule: due counts and send times from a fixed rate, not from answers', async (t) => {
  t.equal(dueBy(100, 1000, 99, 10), 0)
  t.equal(dueBy(100, 1000, 100, 10), 1, 'the first is due at the start')
  t.equal(dueBy(100, 1000, 104.5, 10), 5)
  t.equal(dueBy(100, 1000, 500, 10), 10, 'never more than the schedule holds')
  t.equal(scheduledAt(100, 250, 3), 112)
})

t.test('frames are counted across reads: a "\\n\\n" split between two chunks counts once', async (t) => {
  const counter = new FrameCounter()
  counter.add(Buffer.from('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nretry: 1000\n\n'))
  t.equal(counter.frames, 1, 'the header block\'s CRLFs are no frame')
  counter.add(Buffer.from('id: 1\ndata: {"s":1}\n'))
  counter.add(Buffer.from('\nid: 2\ndata: {"s":2}\n\nid: 3\n'))
  t.equal(counter.frames, 3)
  counter.add(Buffer.from('data: {"s":3}\n\n'))
  t.equal(counter.frames, 4)
  counter.add(Buffer.from('\n'))
  t.equal(counter.frames, 4, 'a chunk that ends a frame leaves nothing pending')
  counter.add(Buffer.from('\r\n1a\r\nid: 4\n'))
  counter.add(Buffer.from('\n'))
  t.equal(counter.frames, 5, 'chunked framing between frames')
})

t.test('the capacity loop: inFlight kept, at most inFlight per turn, nothing sent while the streams\' backlog is over its limit', async (t) => {
  // A memory-bus-like publish: settled within the call.
  let backlog = 0
  const loop = new ClosedLoop(async () => {}, {
    inFlight: 4, backlog: () => backlog, backlogLimit: 100, maxMs: 10_000, maxPublishes: 1_000_000, now: () => performance.now()
  })
  loop.start()
  for (let i = 0; i < 50; i++) await Promise.resolve()
  t.equal(loop.counts.sent, 4, 'every publish settled, and still only 4 this turn: the next wait for the turn to end')
  t.equal(loop.counts.settled, 4)
  // Turns, not time: a 10 ms sleep on a busy machine can span a single turn.
  for (let turn = 0; turn < 3; turn++) await nextTurn()
  t.ok(loop.counts.sent >= 12, `it keeps going turn after turn: ${loop.counts.sent}`)
  backlog = 1000
  await sleep(5)
  const held = loop.counts.sent
  await sleep(20)
  t.equal(loop.counts.sent, held, 'nothing while the streams hold too much')
  backlog = 0
  await sleep(20)
  t.ok(loop.counts.sent > held, 'and on again once they drained')
  const counts = await loop.stop(1000)
  t.equal(counts.failed, 0)
  t.equal(counts.settled, counts.sent)
  t.equal(counts.maxInFlight, 4)

  // A Redis-like publish: settled later; failures counted by code.
  const bounded = new ClosedLoop(async (seq) => {
    await sleep(2)
    if (seq % 5 === 0) throw Object.assign(new Error('busy'), { code: 'TOWER_SSE_BUS_BUSY' })
  }, { inFlight: 8, backlog: () => 0, backlogLimit: 0, maxMs: 10_000, maxPublishes: 40, now: () => performance.now() })
  bounded.start()
  await sleep(100)
  const done = await bounded.stop(1000)
  t.same([done.sent, done.settled, done.failed, done.errors], [40, 32, 8, { TOWER_SSE_BUS_BUSY: 8 }], 'bounded in count, and it stops itself')
})

t.test('the open loop: sends on schedule whatever is in flight, times from the scheduled send, bounded in count', async (t) => {
  let cpu = 0
  const result = await openLoop(async () => { await sleep(30) }, {
    perSec: 500, warmupMs: 20, measureMs: 80, now: () => performance.now(), settleMs: 1000, cpuUs: () => (cpu += 1000)
  })
  t.equal(result.scheduled, 50)
  t.equal(result.measured, 40)
  t.equal(result.settled, 50)
  t.ok(result.maxInFlight >= 10, `publishes overlap, nothing waits for the one before: ${result.maxInFlight} in flight`)
  const latencies = result.latencyUs.counts.reduce((sum, [, n]) => sum + n, 0)
  t.equal(latencies, 40, 'only the measured part is timed')
  t.ok(result.latencyUs.max >= 30_000, 'each latency includes the 30 ms the publish took')
  t.ok(result.windowMs > 70 && result.windowMs < 90, `the measured window spans its schedule: ${result.windowMs} ms`)
  t.equal(result.cpuUs, 1000, 'CPU read at both ends of the measured part')
})

function mark (atMs: number, cpuUs: number, events: number, settled: number, errors: Record<string, number> = {}): Mark {
  return { atMs, cpuUs, events, streams: 1000, closed: {}, busState: 'up', busLagMs: 0, streamWrites: events * 100, backlogBytes: 0, loop: { sent: settled, settled, failed: Object.values(errors).reduce((a, b) => a + b, 0), errors, maxInFlight: 64 } }
}

t.test('capacity figures: deliveries are each instance\'s events fanned out × its streams, per second of its CPU', async (t) => {
  const start: WindowEnd = { marks: [mark(1000, 1e6, 100, 50), mark(2000, 2e6, 100, 40)], redisCpuS: 10, clientCpuUs: 0, runnerAtMs: 0 }
  const end: WindowEnd = { marks: [mark(3000, 2e6, 2100, 1050, { TOWER_SSE_BUS_BUSY: 2 }), mark(4000, 3.5e6, 2100, 1040)], redisCpuS: 11, clientCpuUs: 0.5e6, runnerAtMs: 2000 }
  const c = capacityFigures(start, end)
  t.equal(c.publishes, 2000)
  t.equal(c.publishesPerSec, 1000, '1,000 settled in 2 s on each instance')
  t.equal(c.deliveries, 4_000_000, 'each instance delivered every instance\'s 2,000 events to its 1,000 streams')
  t.equal(c.deliveriesPerSec, 2_000_000)
  t.equal(c.eventsPerWrite, 10, '400,000 writes carried the 4,000,000 deliveries')
  t.equal(c.instanceCpuS, 2.5)
  t.equal(c.instanceCpuPct, 125, '1 s and 1.5 s of CPU in 2 s')
  t.equal(c.deliveriesPerCoreSecond, 1_600_000)
  t.same([c.redisCpuS, c.redisCpuPct, c.deliveriesPerCoreSecondWithRedis], [1, 50, Math.round(4e6 / 3.5)])
  t.equal(c.clientCpuPct, 25)
  t.same([c.failed, c.errors], [2, { TOWER_SSE_BUS_BUSY: 2 }])
  t.throws(() => capacityFigures(start, { ...end, marks: end.marks.slice(1) }), /one mark per instance/)

  const l = latencyFigures(0.5, 1000.4, [
    { sent: 10, settled: 9, failed: 1, errors: { TOWER_SSE_PUBLISH_UNKNOWN: 1 }, maxInFlight: 3, scheduled: 10, measured: 8, latencyUs: { counts: [], max: 0 }, windowMs: 100, cpuUs: 50_000, sentLate: 1, loopDelayP99Ms: 12.04 },
    { sent: 10, settled: 10, failed: 0, errors: {}, maxInFlight: 5, scheduled: 10, measured: 8, latencyUs: { counts: [], max: 0 }, windowMs: 100, cpuUs: 20_000, sentLate: 0, loopDelayP99Ms: 30.5 }
  ], { p50Us: 1500, p99Us: 9000, maxUs: 12_345 })
  t.same(l, { fraction: 0.5, offeredPerSec: 1000, measured: 16, published: 19, failed: 1, errors: { TOWER_SSE_PUBLISH_UNKNOWN: 1 }, p50Ms: 1.5, p99Ms: 9, maxMs: 12.345, maxInFlight: 5, sentLate: 1, instanceCpuPct: 70, loopDelayP99Ms: 30.5 })
})

function row (bus: BusRow['bus'], instances: number, streams: number, perCoreSecond: number, p99AtHalf: number, failedAtHalf = 0): BusRow {
  const latency = (fraction: number, p99Ms: number, failed = 0): LatencyFigures => ({ fraction, offeredPerSec: 100, measured: 500, published: 500 - failed, failed, errors: failed > 0 ? { TOWER_SSE_BUS_BUSY: failed } : {}, p50Ms: 1, p99Ms, maxMs: p99Ms, maxInFlight: 3, sentLate: 0, instanceCpuPct: 40, loopDelayP99Ms: 11 })
  return {
    bus,
    instances,
    streamsPerInstance: streams,
    bytes: 100,
    capacity: { windowS: 5, publishes: 1000, publishesPerSec: 200, deliveries: 1e6, deliveriesPerSec: 2e5, eventsPerWrite: 1, instanceCpuS: 1, instanceCpuPct: 20, deliveriesPerCoreSecond: perCoreSecond, redisCpuS: null, redisCpuPct: null, deliveriesPerCoreSecondWithRedis: perCoreSecond, clientCpuPct: 10, failed: 0, errors: {} },
    latency: [latency(0.25, 1), latency(0.5, p99AtHalf, failedAtHalf), latency(0.75, 50)],
    undelivered: 0,
    streamsDropped: 0,
    streamsClosed: {}
  }
}

t.test('the targets are judged on the run\'s own rows: the memory bus of the same case, p99 at 50% in every case', async (t) => {
  const rows = [row('memory', 1, 1000, 1_000_000, 2), row('redis', 1, 1000, 850_000, 9), row('redis', 2, 1000, 790_000, 4), row('redis', 1, 10, 100_000, 3), row('memory', 1, 10, 900_000, 1)]
  t.equal(shareOfMemory(rows, rows[1]), 0.85)
  t.equal(shareOfMemory(rows, rows[3]), 100_000 / 900_000, 'the memory row of the same streams and bytes')
  t.equal(shareOfMemory([rows[1]], rows[1]), null, 'no memory row, no share')
  const targets = busTargets(rows)
  t.same(targets.map((x) => x.met), [false, true], 'one Redis case below 0.8× at 1,000 streams; p99 at 50% within 10 ms everywhere')
  t.match(targets[0].measured, /^1 inst\., 100 B: ×0\.85; 2 inst\., 100 B: ×0\.79$/, 'only the 1,000-stream Redis rows are judged against memory')
  t.match(targets[1].measured, /memory, 1,000 streams, 100 B: 2 ms; Redis ×1, 1,000 streams, 100 B: 9 ms/)
  t.same(busTargets([row('memory', 1, 1000, 1, 10.5)]).map((x) => x.met), [false], 'over 10 ms at 50%: NOT met (and no Redis row: no share target)')
  t.same(busTargets([row('memory', 1, 1000, 1, 3, 2)]).map((x) => x.met), [false], 'a publish that failed at 50% is not within the bound')
  const unmeasured = { ...row('redis', 4, 10, 1, 1), latency: [] }
  const judged = busTargets([row('memory', 1, 10, 1, 3), unmeasured])
  t.same(judged.map((x) => x.met), [false], 'a case whose latency was not measured is not within the bound')
  t.match(judged[0].measured, /Redis ×4, 10 streams, 100 B: not measured/)
  t.same(busTargets([{ ...row('memory', 1, 10, 1, 3), latency: [] }]), [], 'no share of 50% in the run: no latency target')
})

t.test('a tiny run on a real redis-server: every case publishes, every stream reads every event, the report carries it', async (t) => {
  const redis = await startRedis()
  t.teardown(() => redis.kill())
  const plan = { ...QUICK_PLAN, instances: [1, 2], streams: [3], bytes: [100], inFlight: 4, warmupMs: 50, measureMs: 200, fractions: [0.25, 0.5], latencyWarmupMs: 30, latencyMs: 120, drainMs: 3000 }
  const lines: string[] = []
  const { rows, failures } = await runBus(plan, redis.url, (line) => lines.push(line))
  t.same(failures, [])
  t.same(rows.map((r) => [r.bus, r.instances, r.streamsPerInstance, r.bytes]), [['memory', 1, 3, 100], ['redis', 1, 3, 100], ['redis', 2, 3, 100]])
  for (const r of rows) {
    const c = r.capacity
    t.ok(c.publishes > 0 && c.failed === 0, `${r.bus} ×${r.instances}: ${c.publishes} published, none failed`)
    t.equal(c.deliveries % 3, 0, 'deliveries are events × streams')
    t.ok(c.eventsPerWrite >= 1, `each write carries an event or more: ${c.eventsPerWrite}`)
    t.ok(c.deliveries >= c.publishes * 3, 'every instance delivers every instance\'s events')
    t.ok(c.instanceCpuS > 0 && c.deliveriesPerCoreSecond > 0, 'the instances\' CPU was read')
    t.equal(c.redisCpuS === null, r.bus === 'memory', 'Redis\'s CPU on the Redis bus only')
    t.same(r.latency.map((l) => l.fraction), [0.25, 0.5])
    for (const l of r.latency) t.ok(l.published > 0 && l.p50Ms > 0 && l.p99Ms >= l.p50Ms, `${l.fraction * 100}%: latencies measured`)
    t.same([r.undelivered, r.streamsDropped], [0, 0], 'every stream read every event')
  }
  t.equal(lines.length, 3 * 3, 'one line for the capacity and one per share, per row')
  const failed = await runBus({ ...plan, buses: ['redis'], instances: [1] }, null, () => {})
  t.same(failed, { rows: [], failures: [{ bus: 'redis', instances: 1, streamsPerInstance: 3, error: 'the Redis bus needs a redis-server' }] }, 'a cell that cannot run is listed, not fatal')
  const dir = await mkdtemp(path.join(os.tmpdir(), 'bench-bus-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const results: BusResults = {
    finishedAt: new Date().toISOString(), durationS: 1, redisVersion: '7', machine: { cpus: 2, loadBefore: [0, 0, 0], loadAfter: [0, 0, 0] }, machineNote: null, plan, rows, failures, targets: busTargets(rows)
  }
  const markdown = await writeBusReport(dir, results)
  t.same(JSON.parse(await readFile(path.join(dir, 'bus.json'), 'utf8')).rows, rows)
  t.equal(await readFile(path.join(dir, 'bus.md'), 'utf8'), markdown + '\n')
  t.match(markdown, /\| redis \| 2 \| 3 \| 100 \| [\d,]+ \| [\d,]+ \| [\d.]+ \| [\d.]+% \| [\d,]+ \| ×\d+\.\d\d \| [\d.]+% \|/)
  t.match(markdown, /\| memory \| 1 \| 3 \| 100 \| [\d,]+ \| [\d,/]+s: [\d.]+ \/ [\d.]+ \/ [\d.]+ \|/)
  t.match(markdown, /publish p99 ≤ 10 ms at 50% of the case's measured capacity/)
  t.match(await writeBusReport(dir, { ...results, failures: failed.failures }), /## Cells not measured\n\n- redis ×1, 3 streams each: the Redis bus needs a redis-server/)
  t.match(await readFile(path.join(dir, 'bus.svg'), 'utf8'), /^<svg[^>]*>[\s\S]*deliveries per core-second/)
})
