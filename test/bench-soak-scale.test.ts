import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import type { FanoutRow } from '../benchmarks/lib/tower/fanout-phase'
import { resultsDir } from '../benchmarks/lib/results-files'
import { capacity, scaleTargets } from '../benchmarks/scale/capacity'
import type { ScaleRow } from '../benchmarks/scale/ladder'
import { ceilingStreams, FULL_PLAN as SCALE_FULL, parseArgs as parseScaleArgs, QUICK_PLAN as SCALE_QUICK, resolveSteps } from '../benchmarks/scale/plan'
import { writeScaleReport, type ScaleResults } from '../benchmarks/scale/report'
import { accountSequence } from '../benchmarks/lib/clients/accounting'
import { emptyPostLog, type NotifyOutcome } from '../benchmarks/lib/clients/notify'
import { choosePinning, parseCpuList } from '../benchmarks/lib/cpu-affinity'
import { FULL_PLAN, maxClients, parseArgs, QUICK_PLAN, STORM_ADDRESS, towerFlags, waveStarts, type SoakPlan } from '../benchmarks/soak/plan'
import { postsDue, postWindowed, SendWindow } from '../benchmarks/soak/post-window'
import { afterWaveStop, judgeLoopLag, logBudget, soakRun, upgradeRun, writeSoakReport, type SoakResults } from '../benchmarks/soak/report'
import { counterIncrease, lagWindows, quarters, readMetrics, type Sample } from '../benchmarks/soak/samples'
import { pinningRecord, type SoakTraffic } from '../benchmarks/soak/soak'

// The soak and scale benchmarks' own logic: plans, judging, the capacity formula and the shape of
// their results, on synthetic figures. No speed is asserted; the benches themselves are not run.

/** Exactly the targets named by `patterns`, in order, are NOT met. */
function notMet (t: Test, failed: string[], patterns: RegExp[], message?: string): void {
  t.equal(failed.length, patterns.length, `${message ?? 'NOT met'}: ${failed.join('; ')}`)
  patterns.forEach((pattern, i) => t.match(failed[i], pattern))
}

const machine = { cpus: 2, loadBefore: [0.1, 0.2, 0.3], loadAfter: [0.4, 0.5, 0.6] }

t.test('bench:soak plans: 30 min by default, ≈3 with --quick, knobs in any order', async (t) => {
  t.equal(FULL_PLAN.durationMs, 30 * 60_000)
  t.equal(QUICK_PLAN.durationMs, 3 * 60_000)
  t.equal(parseArgs([]).plan.workers, 1)
  const short = parseArgs(['--minutes=1', '--quick', '--workers=2'])
  t.equal(short.plan.name, 'quick')
  t.equal(short.plan.durationMs, 60_000, '--minutes applies after --quick too')
  t.equal(short.plan.workers, 2)
  t.equal(short.targeted, true)
  t.equal(parseArgs(['--minutes=45']).targeted, false, 'a longer run still is the issue\'s run')
  t.equal(parseArgs(['--out=/tmp/x']).outDir, '/tmp/x')
  t.equal(parseArgs(['--help']).help, true)
  t.throws(() => parseArgs(['--minutes=0']), /--minutes takes an integer 1-1440, got "0"/)
  t.throws(() => parseArgs(['--workers=two']), /--workers takes an integer 1-16, got "two"/)
  t.throws(() => parseArgs(['--fast']), /unknown argument "--fast"/)
})

t.test('storm waves fit wholly inside the run; the storm holds only its own key\'s slots', async (t) => {
  t.same(waveStarts(FULL_PLAN), [60_000, 240_000, 420_000, 600_000, 780_000, 960_000, 1_140_000, 1_320_000, 1_500_000, 1_680_000])
  t.same(waveStarts({ ...QUICK_PLAN, durationMs: 60_000 }), [30_000])
  t.same(waveStarts({ ...QUICK_PLAN, durationMs: 49_000 }), [], 'a wave that would outlast the run is not started')
  t.ok(FULL_PLAN.storm.perSec * 60 >= 49_500, 'the seed\'s 49.5K/min')
  const flags = towerFlags(FULL_PLAN)
  t.equal(flags[flags.indexOf('--max-clients-per-key') + 1], String(FULL_PLAN.storm.slots))
  // Every other client is 127.0.0.1; the storm's X-Forwarded-For counts only from a trusted loopback proxy.
  t.equal(flags[flags.indexOf('--trust-proxy') + 1], '127.0.0.1')
  t.not(STORM_ADDRESS, '127.0.0.1', 'the storm has a key of its own')
  t.equal(flags[flags.indexOf('--max-clients') + 1], String(maxClients(FULL_PLAN)))
  t.ok(Number(flags[flags.indexOf('--max-buffered-bytes') + 1]) >= FULL_PLAN.tower.historyBytes, 'a replay of the whole history fits a client\'s budget (a larger one is a resync)')
  const steady = FULL_PLAN.steady.seqClients + FULL_PLAN.steady.seqEventSources + FULL_PLAN.steady.groups.reduce((sum, g) => sum + g.size, 0)
  t.ok(maxClients(FULL_PLAN) >= steady + FULL_PLAN.storm.slots, 'steady clients are never refused for capacity')
  for (const group of FULL_PLAN.steady.groups) t.ok(group.size <= FULL_PLAN.storm.slots, `${group.population} fits under its key's cap`)
})

t.test('results go to results/ only for a full, untargeted run', async (t) => {
  t.equal(resultsDir('/repo', null, false), path.join('/repo', 'benchmarks', 'results'))
  t.equal(resultsDir('/repo', null, true), path.join('/repo', 'benchmarks', 'results', 'tmp'))
  t.equal(resultsDir('/repo', '/elsewhere', true), '/elsewhere')
})

t.test('a counter\'s increase counts a restart from 0 (a replaced worker) in full', async (t) => {
  t.equal(counterIncrease([0, 10, 25]), 25)
  t.equal(counterIncrease([0, 10, 25, 4, 9]), 34, '25, then a new worker counting 4 and 9')
  t.equal(counterIncrease([7]), 0)
})

t.test('a /metrics text is read into a sample: sums over labels, seconds to ms', async (t) => {
  const text = [
    '# TYPE nodejs_heap_size_used_bytes gauge', 'nodejs_heap_size_used_bytes 1000',
    '# TYPE process_resident_memory_bytes gauge', 'process_resident_memory_bytes 5000',
    '# TYPE process_open_fds gauge', 'process_open_fds 42',
    '# TYPE nodejs_eventloop_lag_p99_seconds gauge', 'nodejs_eventloop_lag_p99_seconds 0.0125',
    '# TYPE tower_sse_streams gauge', 'tower_sse_streams 55',
    '# TYPE tower_sse_connects_total counter', 'tower_sse_connects_total 300',
    '# TYPE tower_sse_refusals_total counter', 'tower_sse_refusals_total{reason="capacity"} 7', 'tower_sse_refusals_total{reason="perKey"} 93', ''
  ].join('\n')
  t.same(readMetrics(text), { heapUsedBytes: 1000, rssBytes: 5000, openFds: 42, loopLagP99Ms: 12.5, streams: 55, connects: 300, refusals: 100 })
  t.throws(() => readMetrics('# TYPE other gauge\nother 1\n'), /GET \/metrics has no nodejs_heap_size_used_bytes/)
})

function sample (t: number, heap: number, extra: Partial<Sample> = {}): Sample {
  return { t, heapUsedBytes: heap, rssBytes: heap * 2, openFds: 50, loopLagP99Ms: 10, streams: 55, connects: t * 100, refusals: t * 200, logLines: 1, clientTimeWait: 0, clientLagEvents: 0, ...extra }
}

t.test('the heap check compares the last quarter with the second, skipping the warm-up', async (t) => {
  // 0-25 s warm-up at 100, second quarter 200, third 300, last 220 (incl. the sample after the end).
  const samples = [sample(10, 100), sample(20, 100), sample(30, 200), sample(40, 200), sample(60, 300), sample(80, 210), sample(100, 230)]
  const heap = quarters(samples, 100, (s) => s.heapUsedBytes)
  t.equal(heap.second, 200)
  t.equal(heap.last, 220)
  t.equal(heap.ratio, 1.1)
  t.throws(() => quarters([sample(10, 1)], 100, (s) => s.heapUsedBytes), /no samples between 25 s and 50 s/)
})

function traffic (overrides: Partial<SoakTraffic> = {}): SoakTraffic {
  const samples = Array.from({ length: 180 }, (_, i) => sample((i + 1) * 10, 50e6, { logLines: Math.floor(i / 3) }))
  const kind = { kind: 'client' as const, clients: 20, goneAtStart: 0, received: 100, lost: 0, coveredByResync: 0, duplicated: 0, outOfOrder: 0, unexpected: 0, clientsWithLoss: 0, clientsWithDuplicates: 0, clientsOutOfOrder: 0, resyncs: [[0, 20]] as Array<[number, number]>, resyncsReconnected: [], resyncsStayed: [[0, 20]] as Array<[number, number]>, refusals: 0, closedForGood: 0 }
  return {
    durationS: 1800,
    drainS: 2.5,
    fdsBaseline: 21,
    fdsAfter: 25,
    samples,
    posts: { posted: 1_050_000, accepted: 1_050_000, refused: {}, unanswered: 0 },
    poster: { nextSeq: 1_050_001, inFlightLimit: 32, maxInFlight: 9, maxBehind: 40, behindAtEnd: 0 },
    pinning: { pinned: true, serverCpu: 0, loadCpu: 1, reason: null, towerCpus: '0', posterCpus: '1' },
    kinds: [kind],
    waves: [{ atS: 60, stoppedS: 150, attempts: 74_000, errors: {}, failed: null }],
    incidents: [],
    ...overrides
  }
}

t.test('soak targets: every one met on a clean run, each NOT met when its figure is off', async (t) => {
  const plan = structuredClone(FULL_PLAN) as SoakPlan
  const clean = soakRun(plan, traffic(), { lines: 60, text: [], lifeS: 1800 }, machine, null)
  t.equal(clean.attempts, 1800 * 100 + 1800 * 200, 'connects + refusals, from the counters')
  t.equal(clean.publishes, 1_050_000)
  t.same(clean.targets.filter((x) => !x.met).map((x) => x.target), [])
  const judged = (over: Partial<SoakTraffic>, lines = 60): string[] => soakRun(plan, traffic(over), { lines, text: [], lifeS: 1800 }, machine, null).targets.filter((x) => !x.met).map((x) => x.target)
  notMet(t, judged({ durationS: 1700 }), [/30 minutes/])
  notMet(t, judged({ posts: { posted: 999_999, accepted: 999_999, refused: {}, unanswered: 0 } }), [/1,000,000 publishes/])
  notMet(t, judged({ fdsAfter: 32 }), [/open files back to the baseline/])
  const growing = traffic().samples.map((s) => s.t > 1350 ? { ...s, heapUsedBytes: 56e6 } : s)
  notMet(t, judged({ samples: growing }), [/heap used/], 'last quarter 1.12× the second')
  const lag = traffic().samples.map((s, i) => i === 90 ? { ...s, loopLagP99Ms: 51 } : s)
  notMet(t, judged({ samples: lag }), [/event-loop lag p99 ≤ 50 ms in every 10 s window/], 'one window of 180 over 50 ms')
  const lagged = soakRun(plan, traffic({ samples: lag }), { lines: 60, text: [], lifeS: 1800 }, machine, null)
  t.match(lagged.targets.find((x) => /event-loop lag/.test(x.target)), { measured: '1 of 180 windows over 50 ms; worst 51.0 ms (900–910 s)', met: false })
  const missing = traffic().samples.filter((_, i) => i !== 40)
  notMet(t, judged({ samples: missing }), [/event-loop lag/], 'a scrape that failed leaves a 20 s window: not judged as one 10 s window')
  t.match(soakRun(plan, traffic({ samples: missing }), { lines: 60, text: [], lifeS: 1800 }, machine, null).targets.find((x) => /event-loop lag/.test(x.target))?.measured,
    /all 179 windows ≤ 50 ms; worst 10\.0 ms \(0–10 s\); 1 window\(s\) longer than 1\.5× 10 s, a scrape missing before them, not judged as one: 400–420 s/)
  notMet(t, judged({ kinds: [{ ...traffic().kinds[0], duplicated: 1 }] }), [/0 lost, 0 duplicated/])
  notMet(t, judged({}, logBudget(plan, 1800) + 1), [/log lines/])
  // TIME_WAIT within 60 s of a wave's stop is the bench aborting the storm; elsewhere it counts.
  const afterStop = traffic().samples.map((s) => s.t === 160 ? { ...s, clientTimeWait: 800 } : s)
  t.same(judged({ samples: afterStop }), [])
  t.equal(soakRun(plan, traffic({ samples: afterStop }), { lines: 60, text: [], lifeS: 1800 }, machine, null).clientTimeWaitAfterWaveStops, 800)
  // The abort starts when the wave's time is up, before the wave is recorded stopped (its closes take a while).
  const atTimeUp = traffic().samples.map((s) => s.t === 150 ? { ...s, clientTimeWait: 969 } : s)
  const lateStop = traffic({ samples: atTimeUp, waves: [{ ...traffic().waves[0], stoppedS: 152.8 }] })
  t.same([soakRun(plan, lateStop, { lines: 60, text: [], lifeS: 1800 }, machine, null).clientTimeWait, judged({ samples: atTimeUp, waves: lateStop.waves })], [0, []])
  const lastClose = traffic().samples.map((s) => s.t === 210 ? { ...s, clientTimeWait: 1450 } : s)
  t.same(judged({ samples: lastClose, waves: lateStop.waves }), [], 'and until 60 s after the last close')
  const during = traffic().samples.map((s) => s.t === 100 ? { ...s, clientTimeWait: 3 } : s)
  // How far the slowest client fell behind is reported with the loss figures; it is no target of its own.
  const behind = traffic().samples.map((s) => s.t === 300 ? { ...s, clientLagEvents: 900 } : s.t === 310 ? { ...s, clientLagEvents: 40 } : s)
  const lagging = soakRun(plan, traffic({ samples: behind }), { lines: 60, text: [], lifeS: 1800 }, machine, null)
  t.equal(lagging.clientLagMaxEvents, 900)
  t.match(lagging.targets.find((x) => /0 lost/.test(x.target)), { measured: /at most 900 events behind at a sample; all caught up 2\.5 s after/, met: true })
  notMet(t, judged({ samples: during }), [/client-side TIME_WAIT/])
  const failedWave = { ...traffic().waves[0], attempts: 0, failed: 'no reply to "start" within 30000 ms' }
  const short = soakRun(plan, traffic({ waves: [failedWave], samples: traffic().samples.map((s) => ({ ...s, connects: 1, refusals: 0 })) }), { lines: 60, text: [], lifeS: 1800 }, machine, null)
  t.match(short.targets.find((x) => /connection attempts/.test(x.target)), { measured: '1 (1 storm wave(s) failed to start)', met: false })
})

t.test('loop lag is judged per window: each sample\'s p99 covers the time since the scrape before it, the first from 0 s', async (t) => {
  const samples = [sample(10, 1, { loopLagP99Ms: 12 }), sample(20.4, 1, { loopLagP99Ms: 61 }), sample(30.1, 1, { loopLagP99Ms: 8 }), sample(50.2, 1, { loopLagP99Ms: 30 })]
  t.same(lagWindows(samples), [{ fromS: 0, toS: 10, p99Ms: 12 }, { fromS: 10, toS: 20.4, p99Ms: 61 }, { fromS: 20.4, toS: 30.1, p99Ms: 8 }, { fromS: 30.1, toS: 50.2, p99Ms: 30 }])
  const judged = judgeLoopLag(samples, 10_000)
  t.same(judged.worst, { fromS: 10, toS: 20.4, p99Ms: 61 })
  t.same(judged.over.map((w) => w.toS), [20.4])
  t.same(judged.unjudged.map((w) => w.toS), [50.2], 'a window over 15 s: a scrape was missing before it')
  t.same(judgeLoopLag([], 10_000), { windows: [], worst: null, over: [], unjudged: [] })
})

t.test('the poster: a schedule of the steady rate plus bursts, at most its window in flight, retired in order, nothing skipped', async (t) => {
  t.equal(postsDue(0, FULL_PLAN.notify), 1)
  t.equal(postsDue(-1, FULL_PLAN.notify), 0)
  t.equal(postsDue(20_000, FULL_PLAN.notify), 560 * 20 + 1 + 400, 'a burst is due at once every 20 s')
  t.ok(postsDue(FULL_PLAN.durationMs - 1, FULL_PLAN.notify) >= 1_000_000, `the full plan schedules ${postsDue(FULL_PLAN.durationMs - 1, FULL_PLAN.notify)} notifies in 30 min: 1,000,000 and more`)
  t.ok(FULL_PLAN.notify.inFlight > 1 && FULL_PLAN.notify.inFlight <= 64, 'several in flight, bounded')
  const window = new SendWindow(1, 3)
  t.same([window.canSend(3), window.canSend(4)], [true, false])
  window.answer(2)
  t.equal(window.canSend(4), false, 'retired in order: 1 still out holds the window')
  window.answer(1)
  t.same([window.canSend(5), window.canSend(6)], [true, false], '1 and 2 answered: up to 5')

  // A fake Tower: answers after a few ms, one in five refused; 2,000/s plus 50 every 100 ms for 300 ms.
  let out = 0
  let most = 0
  const sent: number[] = []
  const log = emptyPostLog()
  const stats = await postWindowed(async (seq): Promise<NotifyOutcome> => {
    sent.push(seq)
    most = Math.max(most, ++out)
    await new Promise((resolve) => setTimeout(resolve, 2 + (seq % 3)))
    out--
    return seq % 5 === 0 ? { kind: 'answered', status: 503, retryAfter: '2', code: 'TOWER_SSE_BUS_BUSY' } : { kind: 'answered', status: 200, retryAfter: null, code: null }
  }, { perSec: 2000, burstEveryMs: 100, burstSize: 50, timeoutMs: 3000, inFlight: 8 }, 300, 1, log)
  t.same(sent, Array.from({ length: sent.length }, (_, i) => i + 1), 'sequence numbers sent in order, none skipped')
  t.equal(stats.nextSeq, sent.length + 1)
  t.ok(most <= 8 && stats.maxInFlight === most, `at most 8 in flight: ${most}`)
  t.equal(log.accepted.length + log.refused.length, sent.length, 'every notify answered and filed')
  t.equal(log.refused.length, Math.floor(sent.length / 5))
  t.ok(stats.maxBehind > 0, `a burst puts it behind its schedule for a moment: ${stats.maxBehind}`)
})

t.test('order with notifies in flight: only numbers a window apart must arrive in sequence order', async (t) => {
  const accepted = new Set([1, 2, 3, 4, 5, 6, 7, 8])
  const none = new Set<number>()
  const range = { from: 1, to: 8 }
  t.equal(accountSequence([2, 1, 4, 3, 5, 6, 8, 7], accepted, none, range).outOfOrder, 3, 'one at a time (window 1): every swap counts')
  t.equal(accountSequence([2, 1, 4, 3, 5, 6, 8, 7], accepted, none, range, undefined, 2).outOfOrder, 0, 'two in flight: neighbours were out together')
  t.equal(accountSequence([1, 2, 5, 3, 4, 6, 7, 8], accepted, none, range, undefined, 2).outOfOrder, 1, '3 was answered before 5 was sent: 3 after 5 is out of order')
  t.same(accountSequence([1, 3, 2, 2, 5, 6, 7, 8], accepted, none, range, undefined, 4), { received: 7, lost: 1, coveredByResync: 0, duplicated: 1, outOfOrder: 0, unexpected: 0 }, 'loss and duplicates as before')
})

t.test('pinning: the server on the first allowed CPU, the load on the second; unpinned and why otherwise', async (t) => {
  t.same(parseCpuList('0-1,3,5-6'), [0, 1, 3, 5, 6])
  t.same(parseCpuList('0\n'), [0])
  t.throws(() => parseCpuList('zero'), /not a CPU list/)
  t.match(choosePinning([0, 1], true), { pinned: true, serverCpu: 0, loadCpu: 1, serverLauncher: ['taskset', '-c', '0'], loadLauncher: ['taskset', '-c', '1'] })
  t.match(choosePinning([2, 5, 7], true), { pinned: true, serverLauncher: ['taskset', '-c', '2'], loadLauncher: ['taskset', '-c', '5'] })
  t.match(choosePinning([0], true), { pinned: false, reason: /only 1 CPU is available/, serverLauncher: [], loadLauncher: [] })
  t.match(choosePinning([0, 1], false), { pinned: false, reason: /taskset \(util-linux\) is not installed/ })
  t.match(choosePinning(null, true), { pinned: false, reason: /unknown/ })
  t.same(pinningRecord(choosePinning([0], true), undefined, undefined), { pinned: false, serverCpu: null, loadCpu: null, reason: 'only 1 CPU is available (nproc 1)', towerCpus: null, posterCpus: null })
  t.match(pinningRecord(choosePinning([0, 1], true), process.pid, undefined), { pinned: true, serverCpu: 0, loadCpu: 1, towerCpus: /^\d/, posterCpus: null }, 'what /proc says a process may use')
})

t.test('a resync is allowed only in the Redis run, where the restart costs one', async (t) => {
  const resynced = { ...traffic().kinds[0], resyncs: [[0, 15], [1, 5]] as Array<[number, number]> }
  const one = soakRun(FULL_PLAN, traffic({ kinds: [resynced] }), { lines: 60, text: [], lifeS: 1800 }, machine, null)
  t.equal(one.resyncedClients, 5)
  t.equal(one.targets.find((x) => /steady clients/.test(x.target))?.met, false)
  const redisPlan = { ...FULL_PLAN, workers: 2 }
  t.equal(soakRun(redisPlan, traffic({ kinds: [resynced] }), { lines: 60, text: [], lifeS: 1800 }, machine, null).targets.find((x) => /steady clients/.test(x.target))?.met, true)
})

t.test('the log budget: per process one line per window plus start and stop; a cluster adds its primary\'s lines and its incidents', async (t) => {
  t.equal(logBudget(FULL_PLAN, 1800), 60 + 2, '30 min of 30 s windows, one process')
  t.equal(logBudget(FULL_PLAN, 1801), 61 + 2, 'a window begun is a window')
  t.equal(logBudget({ ...FULL_PLAN, workers: 2 }, 1800), 2 * 62 + (2 + 2 * 2) + (3 * 2 + 3), 'workers, primary (start, stop, each worker started and exited), incidents')
  const wave = [{ from: 150, to: 152.8 }]
  t.same([149.9, 150, 212.7, 212.8].map((at) => afterWaveStop(at, wave)), [false, true, true, false], 'from time up to 60 s after the last close')
})

function row (contender: string, streams: number, over: Partial<ScaleRow> = {}): ScaleRow {
  return { contender: contender as ScaleRow['contender'], streams, heapKBPerStream: 5, rssKBPerStream: 10, admitMs: 100, admitUsPerStream: 100, broadcastMs: 10, p99Ms: 20, loopDelayP99Ms: 12, loopDelayMaxMs: 15, heartbeatCpuMs: 6, statsMs: 0.01, metricsMs: 4, metricsMaxMs: 6, deliveredPct: 100, ...over }
}

t.test('bench:scale plans: the ceiling comes from the hard file limit; steps never above it', async (t) => {
  t.equal(ceilingStreams(20_000), 19_000)
  t.equal(ceilingStreams(1064), 1000)
  t.throws(() => ceilingStreams(64), /above 64, got 64/)
  t.same(resolveSteps(SCALE_FULL, 19_000), [1000, 5000, 10_000, 15_000, 19_000])
  t.same(resolveSteps(SCALE_QUICK, 19_000), [1000, 3000])
  t.throws(() => resolveSteps({ ...SCALE_FULL, steps: [1000, 30_000] }, 19_000), /30000 streams do not fit under this machine's ceiling of 19000/)
  t.same(parseScaleArgs(['--steps=2000,ceiling']).plan.steps, [2000, 'ceiling'])
  t.equal(parseScaleArgs(['--steps=2000']).targeted, true)
  t.equal(parseScaleArgs(['--no-cluster', '--quick']).plan.cluster, null)
  t.equal(parseScaleArgs([]).targeted, false)
  t.same(parseScaleArgs([]).plan.contenders, ['raw', 'tower-sse+metrics'])
  t.throws(() => parseScaleArgs(['--steps=1000,lots']), /positive integers or "ceiling", got "lots"/)
  t.throws(() => parseScaleArgs(['--workers=2']), /unknown argument/)
})

t.test('the capacity formula on synthetic rows', async (t) => {
  const cap = capacity(row('tower-sse+metrics', 19_000, { rssKBPerStream: 10.24, broadcastMs: 19, heartbeatCpuMs: 15 }))
  t.equal(cap.streamsPerGB, 102_400, '1,048,576 KB ÷ 10.24 KB')
  t.equal(cap.deliveriesPerCoreSecond, 1_000_000, '19,000 streams × 1000 ÷ 19 ms')
  t.same(cap.streamsPerCore, [{ eventsPerSecond: 1, streams: 500_000 }, { eventsPerSecond: 10, streams: 50_000 }], 'half a core')
  t.equal(cap.heartbeatCoreShare, 15 / 30_000)
})

t.test('scale targets: judged at the largest count both reached, each NOT met when off', async (t) => {
  const rows = [row('raw', 1000), row('raw', 19_000), row('tower-sse+metrics', 1000), row('tower-sse+metrics', 19_000, { heapKBPerStream: 5.4 })]
  const cluster: FanoutRow = { setup: 'redis', instances: 2, streams: 38_000, admitted: 38_000, perInstance: [19_000, 19_000], events: 20, notifyFailures: 0, share: 1, p50Ms: 5, p99Ms: 9, maxMs: 12, p99ByRound: [] }
  const failed = (r: ScaleRow[], c: FanoutRow | null = cluster): string[] => scaleTargets(r, 'tower-sse+metrics', 'raw', c).filter((x) => !x.met).map((x) => x.target)
  t.same(failed(rows), [], '5.4 KB is within 10% of 5 and 1.08× raw')
  t.equal(scaleTargets(rows, 'tower-sse+metrics', 'raw', cluster).length, 6)
  const at = (over: Partial<ScaleRow>): ScaleRow[] => [...rows.slice(0, 3), row('tower-sse+metrics', 19_000, over)]
  notMet(t, failed(at({ heapKBPerStream: 5.6 })), [/≤ 1.1× the raw loop's at 19,000/, /flat \(±10%\)/])
  notMet(t, failed(at({ loopDelayP99Ms: 21 })), [/event-loop delay p99/])
  notMet(t, failed(at({ broadcastMs: 11.5 })), [/broadcast time ≤ 1.1× raw/])
  notMet(t, failed(at({ metricsMs: 20.5 })), [/GET \/metrics ≤ 20 ms/])
  notMet(t, failed(at({ metricsMs: null })), [/GET \/metrics/])
  notMet(t, failed(rows, { ...cluster, share: 0.9999 }), [/2 workers on Redis hold 38,000 streams, 100% delivered/])
  notMet(t, failed(rows.slice(0, 3)), [], 'judged at 1,000 when tower-sse never reached 19,000')
  t.match(scaleTargets(rows.slice(0, 3), 'tower-sse+metrics', 'raw', null)[0].target, /at 1,000 streams/)
})

t.test('a run read back from an older soak.json (before pinning, one notify at a time, no windows) still renders', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'soak-old-'))
  const current = soakRun(FULL_PLAN, traffic(), { lines: 60, text: [], lifeS: 1800 }, machine, null)
  const { loopLag: _lag, ...old } = { ...soakRun({ ...FULL_PLAN, workers: 2 }, traffic(), { lines: 200, text: [], lifeS: 1800 }, machine, null) }
  const { pinning: _pinning, poster: _poster, ...oldTraffic } = old.traffic
  const { inFlight: _inFlight, ...oldNotify } = old.plan.notify
  const legacy = { ...old, traffic: oldTraffic, plan: { ...old.plan, notify: oldNotify } } as unknown as SoakResults['runs'][number]
  const upgraded = upgradeRun(legacy)
  t.equal(upgraded.plan.notify.inFlight, 1, 'the poster then was one at a time')
  t.match(upgraded.traffic.pinning, { pinned: false, reason: /not recorded/ })
  t.equal(upgraded.loopLag.windows.length, 180)
  writeFileSync(path.join(dir, 'soak.json'), JSON.stringify({ runs: [legacy] }))
  const md = await writeSoakReport(dir, current)
  t.match(md, /\*\*Not pinned\*\* \(not recorded: a run made before the soak pinned its processes\)/)
  t.match(md, /The poster's own figures were not recorded/)
})

t.test('results shape: soak.json keeps one run per worker count; scale.json has its rows', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'soak-scale-'))
  await writeSoakReport(dir, soakRun(FULL_PLAN, traffic(), { lines: 60, text: [], lifeS: 1800 }, machine, null))
  await writeSoakReport(dir, soakRun({ ...FULL_PLAN, workers: 2 }, traffic({ incidents: [{ what: 'Redis SIGKILLed', atS: 720 }] }), { lines: 200, text: [], lifeS: 1800 }, machine, 'WARNING: started on a busy machine'))
  const soak = JSON.parse(readFileSync(path.join(dir, 'soak.json'), 'utf8')) as { runs: Array<Record<string, unknown>> }
  t.same(soak.runs.map((r) => r.workers), [1, 2])
  for (const key of ['durationS', 'attempts', 'publishes', 'lost', 'duplicated', 'outOfOrder', 'clientTimeWait', 'logLines', 'samples', 'machine', 'targets']) {
    t.ok(key in soak.runs[0], `soak run has ${key}`)
  }
  t.same(Object.keys((soak.runs[0].samples as object[])[0]).slice(0, 5), ['t', 'heapUsedBytes', 'rssBytes', 'openFds', 'loopLagP99Ms'])
  const loopLag = soak.runs[0].loopLag as { windows: Array<{ fromS: number, toS: number, p99Ms: number }>, worst: { p99Ms: number } }
  t.equal(loopLag.windows.length, 180, 'every window\'s p99 is in soak.json')
  t.same(loopLag.windows[0], { fromS: 0, toS: 10, p99Ms: 10 })
  t.equal(loopLag.worst.p99Ms, 10)
  t.match(soak.runs[0].traffic, { pinning: { pinned: true, serverCpu: 0, loadCpu: 1 }, poster: { inFlightLimit: 32 } })
  const md = readFileSync(path.join(dir, 'soak.md'), 'utf8')
  t.match(md, /One process, memory bus/)
  t.match(md, /Incidents: Redis SIGKILLed at 720 s/)
  t.match(md, /after \(1\/5\/15 min\)\. WARNING: started on a busy machine\./, 'a run that started busy says so')
  // The wave from 60 s to 150 s, read from Tower's counters (100 connects and 200 refusals a second).
  t.match(md, /\| 1 \| 60 \| 74,000 \| 9,000 \| 18,000 \| none \|/)
  t.match(md, /all caught up 2\.5 s after the last notify/)
  t.match(md, /Pinned: Tower on CPU 0 \(`taskset -c 0`; \/proc read back: 0\); the accounted clients, the steady populations, the storm waves, the poster \(read back: 1\) and the runner on CPU 1\./)
  t.match(md, /up to 32 in flight \(retired in order; a POST times out after 3 s\)/)
  t.match(md, /\| event-loop lag p99 ≤ 50 ms in every 10 s window \| all 180 windows ≤ 50 ms; worst 10\.0 ms \(0–10 s\) \| met \|/)
  t.match(readFileSync(path.join(dir, 'soak.svg'), 'utf8'), /^<svg/)

  const rows = [row('raw', 1000), row('tower-sse+metrics', 1000)]
  const results: ScaleResults = {
    finishedAt: 'now',
    durationS: 1,
    machine,
    machineNote: null,
    ceiling: { hardLimit: 20_000, source: 'ulimit -Hn = 20000', streams: 19_000 },
    plan: SCALE_QUICK,
    rows,
    cluster: null,
    capacity: capacity(rows[1]),
    targets: scaleTargets(rows, 'tower-sse+metrics', 'raw', null),
    failures: []
  }
  const scaleMd = await writeScaleReport(dir, results)
  const scale = JSON.parse(readFileSync(path.join(dir, 'scale.json'), 'utf8')) as ScaleResults
  for (const key of ['contender', 'streams', 'heapKBPerStream', 'rssKBPerStream', 'broadcastMs', 'p99Ms', 'loopDelayP99Ms', 'metricsMs']) t.ok(key in scale.rows[0], `scale row has ${key}`)
  t.same(scale.machine, machine)
  t.match(scaleMd, /streams per GB of RSS \| 1,048,576 KB ÷ rssKBPerStream \| 104,857/)
  t.match(scaleMd, /Ceiling: ulimit -Hn = 20000/)
})
