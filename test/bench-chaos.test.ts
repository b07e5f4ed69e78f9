import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { accountSequence, RESYNC } from '../benchmarks/lib/clients/accounting'
import { faults } from '../benchmarks/chaos/faults'
import { answerTimes, busStates, judge, NO_ANSWER, publishAgainMs, resyncSummary, type ChaosRow } from '../benchmarks/chaos/judge'
import { FULL_PLAN, parseArgs, QUICK_PLAN } from '../benchmarks/chaos/plan'
import { postAtRate, postLogOf, type PostRecord } from '../benchmarks/chaos/poster'
import { chaosMarkdown, withVerdicts } from '../benchmarks/chaos/report'

// bench:chaos's own logic on synthetic inputs: how notifies and receipts are classified, and how
// the targets are judged. No speed is asserted.

const record = (seq: number, outcome: PostRecord['outcome'], sentAt: number, answeredAt: number): PostRecord =>
  ({ seq, outcome, sentAt, answeredAt, status: outcome === 'accepted' ? 200 : outcome === 'timeout' ? 0 : 503 })

t.test('a receipt is lost, covered by a resync, duplicated, out of order or late by what its notify was answered', async (t) => {
  const records = [
    record(1, 'accepted', 0, 5), record(2, 'accepted', 50, 55), record(3, 'accepted', 100, 105),
    record(4, 'timeout', 150, 3150), record(5, 'refused', 200, 210),
    record(6, 'accepted', 250, 255), record(7, 'accepted', 300, 305), record(8, 'accepted', 350, 355)
  ]
  const log = postLogOf(records)
  t.same(log.accepted, [1, 2, 3, 6, 7, 8])
  t.same(log.refused.map((r) => [r.seq, r.status]), [[4, 0], [5, 503]], 'a timeout is a failed publish to its caller, as a 503 is')
  t.same(log.unknown, [], 'nothing is "maybe published": the caller was told it failed')
  const maybe = postLogOf([...records, record(9, 'unknown', 400, 1400)])
  t.same([maybe.unknown, maybe.refused.length], [[9], 2], 'a 503 TOWER_SSE_PUBLISH_UNKNOWN is "maybe published": neither lost nor late if it arrives')
  t.same(accountSequence([1, 2, 3, 6, 7, 8, 9], new Set(maybe.accepted), new Set(maybe.unknown), { from: 1, to: 9 }).unexpected, 0)
  const range = { from: 1, to: 8 }
  const unknown = new Set(log.unknown)
  const accepted = new Set(log.accepted)
  t.same(accountSequence([1, 2, 4, 3, 3, 6, 8], accepted, unknown, range), { received: 6, lost: 1, coveredByResync: 0, duplicated: 1, outOfOrder: 1, unexpected: 1 },
    '7 acked and missing: lost silently; 4 timed out and arrived: late; 3 twice, and after 4')
  t.same(accountSequence([1, RESYNC, 7, 8], accepted, unknown, range), { received: 3, lost: 0, coveredByResync: 3, duplicated: 0, outOfOrder: 0, unexpected: 0 },
    'what a resync precedes is covered, not lost')
})

t.test('answer times, time to publish again, bus states and resyncs per client', async (t) => {
  const records = [record(1, 'accepted', 0, 10), record(2, 'timeout', 100, 3100), record(3, 'refused', 200, 1200), record(4, 'accepted', 300, 2300), record(5, 'accepted', 5000, 5010)]
  t.same(answerTimes(records, 100, 300), { count: 3, p99Ms: 3000, maxMs: 3000 }, 'only the notifies sent in the window; a timeout counts as its full wait')
  t.same(answerTimes(records, 9000, 9999), { count: 0, p99Ms: null, maxMs: null })
  t.equal(publishAgainMs(records), 2200, 'from the first failed notify sent to the answer of the next accepted one')
  t.equal(publishAgainMs([record(1, 'accepted', 0, 1)]), 0, 'nothing failed')
  t.equal(publishAgainMs([record(1, 'accepted', 0, 1), record(2, 'refused', 5, 6)]), null, 'never accepted again')
  const samples = [{ at: 0, state: 'up' }, { at: 250, state: 'up' }, { at: 500, state: NO_ANSWER }, { at: 1500, state: 'down' }, { at: 1750, state: 'down' }, { at: 2000, state: 'up' }]
  t.same(busStates(samples, 400, 1600), { states: ['up', NO_ANSWER, 'down', 'up'], leftUpAfterMs: 1100, upAgainAfterMs: 400 }, 'a stats route that hangs has not said the bus left up')
  t.same(busStates(samples, 400, 100).upAgainAfterMs, 1900, 'up again: only once it had left up, even if it left after the fault ended')
  t.same(busStates(samples.slice(0, 3), 400, 450), { states: ['up', NO_ANSWER], leftUpAfterMs: null, upAgainAfterMs: null }, 'never left up: not "up again"')
  t.same(busStates(samples.slice(0, 5), 400, 1600).upAgainAfterMs, null, 'not up again by the end')
  t.same(resyncSummary([[0, 6], [1, 3], [2, 1]]), { max: 2, mean: 0.5 })
  t.same(resyncSummary([[0, 0], [3, 0]]), { max: 0, mean: 0 }, 'no clients: no resyncs')
})

const clean: ChaosRow = {
  fault: 'x',
  title: 'x',
  perSec: 20,
  clients: 10,
  posted: 100,
  acknowledged: 100,
  refused: 0,
  timedOut: 0,
  skipped: 0,
  lostSilently: 0,
  coveredByResync: 0,
  duplicated: 0,
  outOfOrder: 0,
  late: 0,
  resyncs: { max: 0, mean: 0 },
  notifyDuringFault: { count: 50, p99Ms: 900, maxMs: 1500 },
  clientsAway: 0,
  streamsDropped: 0,
  deafClosed: 0,
  publishAgainMs: 0,
  bus: { states: ['up'], leftUpAfterMs: null, upAgainAfterMs: null },
  faultMs: 1000,
  losesData: false,
  stall: false,
  failover: false,
  deafens: false
}

t.test('each target is judged on its own column', async (t) => {
  const failing = (row: ChaosRow): string[] => judge(row).filter((v) => !v.met).map((v) => v.target)
  t.same(failing(clean), [], 'a clean row meets every target (1500 ms is within)')
  t.same(judge(clean).length, 5)
  t.same(failing({ ...clean, lostSilently: 1 }), ['acknowledged-then-lost silently = 0'])
  t.same(failing({ ...clean, late: 3 }), ['late deliveries = 0'])
  t.same(failing({ ...clean, streamsDropped: 1 }), ['healthy streams dropped = 0'])
  t.same(failing({ ...clean, notifyDuringFault: { count: 1, p99Ms: 1501, maxMs: 1501 } }), ['notify answered within 1500 ms (max)'])
  t.same(failing({ ...clean, notifyDuringFault: { count: 0, p99Ms: null, maxMs: null } }), ['notify answered within 1500 ms (max)'], 'no notify answered: not met')
  t.same(failing({ ...clean, resyncs: { max: 1, mean: 1 } }), ['resyncs = 0 (nothing lost)'])
  t.same(failing({ ...clean, losesData: true, resyncs: { max: 1, mean: 1 } }), [], 'one resync per client where data is lost')
  t.same(failing({ ...clean, losesData: true, resyncs: { max: 2, mean: 1 } }), ['resyncs <= 1 per client'])
  t.same(failing({ ...clean, stall: true }), ['bus not up within 2000 ms of the stall'], 'a stall the stats never showed')
  t.same(failing({ ...clean, stall: true, bus: { states: ['up', 'down'], leftUpAfterMs: 2000, upAgainAfterMs: null } }), [])
  t.same(failing({ ...clean, stall: true, bus: { states: ['up', 'down'], leftUpAfterMs: 2001, upAgainAfterMs: null } }), ['bus not up within 2000 ms of the stall'])
  const deaf = { ...clean, deafens: true, resyncs: { max: 1, mean: 1 }, deafClosed: 10, bus: { states: ['up', 'down', 'up'], leftUpAfterMs: 5000, upAgainAfterMs: 5000 } }
  t.same(failing(deaf), [], 'deaf: one resync per client (the signal), said within 5 s, up again within 5 s of the heal')
  t.same(failing({ ...deaf, resyncs: { max: 2, mean: 1 } }), ['resyncs <= 1 per client'])
  t.same(failing({ ...deaf, bus: { ...deaf.bus, leftUpAfterMs: 5001 } }), ['deaf said within 5000 ms'])
  t.same(failing({ ...deaf, bus: { ...deaf.bus, leftUpAfterMs: null } }), ['deaf said within 5000 ms'], 'never said: not met')
  t.same(failing({ ...deaf, bus: { ...deaf.bus, upAgainAfterMs: 5001 } }), ['up again within 5000 ms of the heal'])
  t.same(failing({ ...deaf, bus: { ...deaf.bus, upAgainAfterMs: null } }), ['up again within 5000 ms of the heal'], 'never up again: not met')
  t.same(failing({ ...deaf, streamsDropped: 1 }), ['healthy streams dropped = 0'], 'the other instance\'s streams are still healthy ones')
  t.same(failing({ ...clean, failover: true, publishAgainMs: 5001 }), ['publishing again within 5000 ms'])
  t.same(failing({ ...clean, failover: true, publishAgainMs: null }), ['publishing again within 5000 ms'], 'never again: not met')
  t.same(failing({ ...clean, failover: true, publishAgainMs: 5000 }), [])
  const md = chaosMarkdown({
    plan: QUICK_PLAN,
    finishedAt: 'now',
    durationS: 1,
    refused: ['allkeys-lru under memory pressure: Tower exited at start: maxmemory-policy is allkeys-lru'],
    failures: ['clock-ahead: boom'],
    machine: { cpus: 2, loadBefore: [1, 2, 3], loadAfter: [4, 5, 6], description: 'here' },
    rows: [withVerdicts(clean), withVerdicts({ ...clean, title: 'bad', late: 2, clientsAway: 3 }), withVerdicts({ ...deaf, title: 'deaf', streamsDropped: 0 })]
  })
  t.match(md, 'before: 1.00 / 2.00 / 3.00, after: 4.00 / 5.00 / 6.00; 2 CPUs')
  t.match(md, /\| x \|.*\| met \|/)
  t.match(md, /\| bad \|.*\| NOT met: late deliveries = 0 \(2\) \|/)
  t.match(md, 'Targets NOT met: 1 (of 17 judged)')
  t.match(md, /\| deaf \|.*\| 0 \(\+ 10\) \|.*\| up → down → up \(5000 \/ 5000\) \| met \|/, 'the streams A closed while deaf shown apart from the healthy ones dropped')
  t.match(md, '- clock-ahead: boom')
  t.match(md, /Refused at start, as the bus must[^\n]*\n- allkeys-lru under memory pressure: Tower exited at start: maxmemory-policy is allkeys-lru/)
  t.match(md, 'bad: 3 client(s) were still away 30 s after the fault')
  t.notMatch(md, 'x: 0 client(s)', 'only rows with clients away')
})

t.test('plans: one row per fault of the issue; --quick and --only write to results/tmp', async (t) => {
  t.same(faults(FULL_PLAN.times).map((f) => f.name), ['stall-20', 'stall-200', 'failover', 'lagging-replica', 'rdb-restart', 'aof-restart', 'allkeys-lru', 'instance-stop-trim', 'backlog-4kb', 'clock-ahead',
    'latency-200', 'latency-to-redis', 'latency-from-redis', 'half-open', 'redis-kill', 'reset'])
  t.same(faults(FULL_PLAN.times).filter((f) => f.relayed).map((f) => [f.name, f.setup.kind, f.deafens]),
    [['latency-200', 'node', 'none'], ['latency-to-redis', 'node', 'none'], ['latency-from-redis', 'node', 'none'], ['half-open', 'node', 'first'], ['redis-kill', 'node', 'none'], ['reset', 'node', 'none']],
    'the relay\'s faults on one Redis node; only the half-open partition outlasts busDeafCloseMs')
  t.same(faults(FULL_PLAN.times).filter((f) => f.stall).map((f) => f.deafens), ['both', 'both'], 'a 15 s stall of Redis deafens both instances')
  t.same(faults(QUICK_PLAN.times).filter((f) => f.stall).map((f) => f.deafens), ['none', 'none'], 'a 4 s one deafens neither past the spell')
  t.equal(FULL_PLAN.times.partitionMs, 20_000, 'the issue\'s 20 s partition')
  t.ok(QUICK_PLAN.times.partitionMs > 5000, 'even a quick partition outlasts the 5 s detection bound')
  t.equal(FULL_PLAN.times.stallMs, 15_000, 'the issue\'s 15 s stall')
  t.same(faults(FULL_PLAN.times).filter((f) => f.name.startsWith('stall')).map((f) => f.perSec), [20, 200])
  t.ok(faults(FULL_PLAN.times).filter((f) => f.name === 'instance-stop-trim').every((f) => f.perSec * FULL_PLAN.times.instanceStopMs / 1000 >= 1500), 'more events during the stop than the stream keeps (1,000)')
  t.same(parseArgs([], '/r'), { plan: { ...FULL_PLAN, only: [] }, outDir: '/r', help: false })
  t.equal(parseArgs(['--quick'], '/r').outDir, '/r/tmp')
  t.same(parseArgs(['--only', 'stall-20,failover'], '/r'), { plan: { ...FULL_PLAN, only: ['stall-20', 'failover'] }, outDir: '/r/tmp', help: false })
  t.same(parseArgs(['--only=reset,half-open'], '/r').plan.only, ['reset', 'half-open'], '--only=a,b as the README writes it')
  t.equal(parseArgs(['--quick', '--out', '/x'], '/r').outDir, '/x')
  t.throws(() => parseArgs(['--fast'], '/r'), /unknown argument "--fast"/)
})

t.test('the poster: a notify not answered in time is a timeout, a non-200 a refusal; in-flight notifies are bounded', async (t) => {
  // Title 3 never answered, 5 answered 503: a real loopback server.
  const held: http.ServerResponse[] = []
  const server = http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8').on('data', (chunk: string) => { body += chunk }).on('end', () => {
      const { title } = JSON.parse(body) as { title: string }
      if (title === '3') held.push(res)
      else res.writeHead(title === '5' ? 503 : 200).end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const res of held) res.destroy(); server.close() })
  const { port } = server.address() as AddressInfo
  const records: PostRecord[] = []
  const done = await postAtRate(port, { firstSeq: 1, perSec: 50, durationMs: 120, timeoutMs: 300, maxInFlight: 100, bodyBytes: 10 }, records)
  t.same(records.map((r) => [r.seq, r.outcome, r.status]), [[1, 'accepted', 200], [2, 'accepted', 200], [3, 'timeout', 0], [4, 'accepted', 200], [5, 'refused', 503], [6, 'accepted', 200]])
  t.same(done, { nextSeq: 7, skipped: 0 })
  // One in flight at most, and the held one blocks every later tick until it times out.
  const bounded: PostRecord[] = []
  const second = await postAtRate(port, { firstSeq: 3, perSec: 50, durationMs: 100, timeoutMs: 300, maxInFlight: 1, bodyBytes: 0 }, bounded)
  t.same([bounded.map((r) => r.seq), second], [[3], { nextSeq: 4, skipped: 4 }], 'the ticks while one was out were skipped, not queued')
  let stop = false
  const stopped = postAtRate(port, { firstSeq: 10, perSec: 100, durationMs: 60_000, timeoutMs: 300, maxInFlight: 10, bodyBytes: 0, until: () => stop }, [])
  setTimeout(() => { stop = true }, 50)
  t.ok((await stopped).nextSeq < 100, 'until() ends a run long before its duration')
})
