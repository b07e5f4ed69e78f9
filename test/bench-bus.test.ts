import { mkdtemp, readFile, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { startRedis } from '../benchmarks/lib/redis-server'
import { FULL_PLAN, parseArgs, QUICK_PLAN } from '../benchmarks/bus/plan'
import { batchRatio, busTargets, writeBusReport, type BusResults, type BusRow } from '../benchmarks/bus/report'
import { runBus } from '../benchmarks/bus/run'

// bench:bus itself, kept runnable at a tiny size on a real redis-server. No figure is asserted:
// only that every case measures something real and the report judges the targets on it.

t.test('plans and arguments: the issue\'s cases by default, filters that say what they narrow, errors that name the argument', async (t) => {
  t.same([FULL_PLAN.instances, FULL_PLAN.streams, FULL_PLAN.bytes, FULL_PLAN.modes], [[1, 2], [10, 1000], [100, 4096], ['unbatched', 'batched']])
  t.equal(parseArgs(['--quick']).plan.name, 'quick')
  t.same(parseArgs(['--quick']).plan.streams, QUICK_PLAN.streams)
  t.equal(parseArgs([]).targeted, false)
  const narrow = parseArgs(['--instances=2', '--streams=50', '--bytes=200', '--modes=batched', '--in-flight=8', '--measure-ms=100', '--out=/tmp/x'])
  t.same([narrow.plan.instances, narrow.plan.streams, narrow.plan.bytes, narrow.plan.modes, narrow.plan.inFlight, narrow.plan.measureMs, narrow.outDir, narrow.targeted],
    [[2], [50], [200], ['batched'], 8, 100, '/tmp/x', true])
  t.equal(parseArgs(['--out=/tmp/x']).targeted, false, 'only where it goes: still the whole plan')
  t.throws(() => parseArgs(['--modes=fast']), /--modes: unknown mode "fast"; known: unbatched, batched/)
  t.throws(() => parseArgs(['--streams=0']), /--streams takes comma-separated integers 1-5000, got "0"/)
  t.throws(() => parseArgs(['--fast']), /unknown or malformed argument "--fast"/)
})

t.test('the targets are judged on the run\'s own rows: the ratio of the same case, p99 at 1,000 streams', async (t) => {
  const row = (mode: BusRow['mode'], publishesPerSec: number, p99Ms: number, streamsPerInstance = 1000): BusRow => ({
    instances: 1, streamsPerInstance, bytes: 100, mode, published: 1, failed: 0, errors: {}, publishesPerSec, p50Ms: 1, p99Ms, maxMs: p99Ms, streamBytes: 1
  })
  const rows = [row('unbatched', 1000, 30), row('batched', 3500, 12), row('unbatched', 1000, 5, 10), row('batched', 2000, 4, 10)]
  t.equal(batchRatio(rows, rows[1]), 3.5)
  t.equal(batchRatio(rows, rows[3]), 2)
  const targets = busTargets(rows)
  t.same(targets.map((target) => target.met), [false, true], 'one case below 3×; the batched p99 at 1,000 streams within 20 ms')
  t.match(targets[0].measured, /1×1,000, 100 B: ×3\.50; 1×10, 100 B: ×2\.00/)
})

t.test('a tiny run on a real redis-server: every case publishes, every stream reads, the report carries it', async (t) => {
  const redis = await startRedis()
  t.teardown(() => redis.kill())
  const plan = { ...QUICK_PLAN, instances: [1, 2], streams: [3], bytes: [100], inFlight: 4, warmupMs: 50, measureMs: 150 }
  const lines: string[] = []
  const rows = await runBus(plan, redis.url, (line) => lines.push(line))
  t.same(rows.map((r) => [r.instances, r.streamsPerInstance, r.bytes, r.mode]), [[1, 3, 100, 'unbatched'], [1, 3, 100, 'batched'], [2, 3, 100, 'unbatched'], [2, 3, 100, 'batched']])
  for (const r of rows) {
    t.ok(r.published > 0 && r.failed === 0, `${r.instances} × ${r.mode}: ${r.published} published, none failed`)
    t.ok(r.p50Ms > 0 && r.p99Ms >= r.p50Ms, 'latencies measured')
    t.ok(r.streamBytes > 0, 'the streams read the events')
  }
  t.equal(lines.length, 4, 'one progress line per row')
  const dir = await mkdtemp(path.join(os.tmpdir(), 'bench-bus-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const results: BusResults = {
    finishedAt: new Date().toISOString(), durationS: 1, redisVersion: '7', machine: { cpus: 2, loadBefore: [0, 0, 0], loadAfter: [0, 0, 0] }, machineNote: null, plan, rows, targets: busTargets(rows)
  }
  const markdown = await writeBusReport(dir, results)
  t.same(JSON.parse(await readFile(path.join(dir, 'bus.json'), 'utf8')).rows, rows)
  t.equal(await readFile(path.join(dir, 'bus.md'), 'utf8'), markdown + '\n')
  t.match(markdown, /\| 2 \| 3 \| 100 \| batched \| [\d,]+ \| ×\d+\.\d\d \|/)
  t.match(markdown, /batched ≥ 3× the unbatched publishes\/s/)
  t.match(await readFile(path.join(dir, 'bus.svg'), 'utf8'), /^<svg[^>]*>[\s\S]*publishes\/s/)
})
