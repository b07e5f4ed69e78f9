import path from 'node:path'
import { Redis } from 'ioredis'
import t from 'tap'
import { accountSequence, addAccount, emptyPhaseAccount, RESYNC, resyncThrough } from '../benchmarks/lib/clients/accounting'
import type { ChaosResult } from '../benchmarks/cluster/chaos'
import type { KindRow } from '../benchmarks/lib/clients/population'
import type { RestartResult } from '../benchmarks/cluster/restart'
import type { FanoutRow } from '../benchmarks/lib/tower/fanout-phase'
import { combineRounds, TITLE_MARKER } from '../benchmarks/lib/tower/fanout-phase'
import { defaultOutDir, fanoutCases, FULL_PLAN, parseArgs, QUICK_PLAN } from '../benchmarks/cluster/plan'
import { parseCommandStats, startRedis } from '../benchmarks/lib/redis-server'
import { clusterMarkdown, targets, type ClusterResults } from '../benchmarks/cluster/report'
import { StampScanner } from '../benchmarks/lib/fanout/stamp-scanner'

// The cluster benchmark's own logic: its plans, where results go, how a client's events are
// accounted for, and how targets are judged. No speed is asserted.

t.test('--quick is the same run, scaled down; filters apply to either plan', async (t) => {
  const quick = parseArgs(['--quick']).plan
  t.same(quick.phases, ['fanout', 'chaos', 'restart'])
  t.equal(quick.workers, FULL_PLAN.workers, 'the same number of workers')
  t.same(quick.fanout.streams, [200, 1000])
  t.same(FULL_PLAN.fanout.streams, [1000, 10_000])
  t.ok(quick.chaos.clients < FULL_PLAN.chaos.clients && quick.chaos.eventSourceClients < FULL_PLAN.chaos.eventSourceClients)
  t.ok(quick.chaos.durationMs / quick.chaos.killEveryMs >= 2, 'a quick run still kills at least one worker')
  t.equal(FULL_PLAN.chaos.durationMs, 120_000)
  t.equal(FULL_PLAN.chaos.broadcastsPerSec, 20)
  t.equal(FULL_PLAN.chaos.killEveryMs, 15_000)
  const filtered = parseArgs(['--phases=restart', '--quick', '--streams=50'])
  t.same(filtered.plan.phases, ['restart'], 'a filter before or after --quick')
  t.same(filtered.plan.fanout.streams, [50])
  t.equal(filtered.targeted, true)
  t.equal(parseArgs([]).targeted, false)
  t.throws(() => parseArgs(['--phases=chaos,storm']), /unknown phase "storm"/)
  t.throws(() => parseArgs(['--streams=10,x']), /positive integers, got "x"/)
  t.throws(() => parseArgs(['--fast']), /unknown argument "--fast"/)
  t.equal(parseArgs(['--rounds=1']).plan.fanout.rounds, 1)
  t.equal(FULL_PLAN.fanout.rounds, 3)
  t.throws(() => parseArgs(['--rounds=0']), /--rounds takes a positive integer/)
  t.equal(parseArgs(['--help']).help, true)
  t.equal(parseArgs(['--render']).render, true)
  t.equal(parseArgs(['--out=/tmp/x']).outDir, '/tmp/x')
  t.equal(QUICK_PLAN.name, 'quick')
})

t.test('only a full, unfiltered run writes over the committed results', async (t) => {
  const results = path.join('benchmarks', 'results')
  t.equal(defaultOutDir(results, FULL_PLAN, false), results)
  t.equal(defaultOutDir(results, QUICK_PLAN, false), path.join(results, 'tmp'))
  t.equal(defaultOutDir(results, FULL_PLAN, true), path.join(results, 'tmp'), 'a targeted full run')
})

t.test('a client\'s events are accounted: lost, duplicated, out of order, unexpected', async (t) => {
  const accepted = new Set([1, 2, 3, 4, 5, 6])
  const none = new Set<number>()
  const range = { from: 1, to: 6 }
  t.same(accountSequence([1, 2, 3, 4, 5, 6], accepted, none, range),
    { received: 6, lost: 0, coveredByResync: 0, duplicated: 0, outOfOrder: 0, unexpected: 0 }, 'all, in order')
  const lostSeqs: number[] = []
  t.same(accountSequence([1, 2, 4, 6], accepted, none, range, (seq) => lostSeqs.push(seq)),
    { received: 4, lost: 2, coveredByResync: 0, duplicated: 0, outOfOrder: 0, unexpected: 0 })
  t.same(lostSeqs, [3, 5], 'which ones were lost')
  t.same(accountSequence([1, 2, 3, 2, 3, 4, 5, 6], accepted, none, range),
    { received: 6, lost: 0, coveredByResync: 0, duplicated: 2, outOfOrder: 0, unexpected: 0 }, 'a replay of what it had')
  t.same(accountSequence([1, 3, 2, 4, 6, 5], accepted, none, range),
    { received: 6, lost: 0, coveredByResync: 0, duplicated: 0, outOfOrder: 2, unexpected: 0 })
  t.same(accountSequence([1, 2, 4, 5, 6], new Set([1, 2, 4, 5, 6]), new Set([3]), range).lost, 0,
    'a POST without an answer may not have been published: missing it is no loss')
  t.same(accountSequence([1, 2, 3, 4, 5, 6, 7], accepted, new Set([7]), { from: 1, to: 7 }).unexpected, 0, 'nor is receiving it')
  t.same(accountSequence([1, 2, 3, 4, 5, 6, 7], accepted, none, { from: 1, to: 7 }).unexpected, 1, 'a refused notify that was delivered')
  t.same(accountSequence([9, 1, 2, 3, 4, 5, 6, 10], accepted, none, range).received, 6, 'outside the range: ignored')
})

t.test('a resync covers what was missed before the first event after it, nothing after', async (t) => {
  const accepted = new Set([1, 2, 3, 4, 5, 6, 7, 8])
  const range = { from: 1, to: 8 }
  t.same(accountSequence([1, 2, RESYNC, 5, 6, 7, 8], accepted, new Set(), range),
    { received: 6, lost: 0, coveredByResync: 2, duplicated: 0, outOfOrder: 0, unexpected: 0 })
  t.same(accountSequence([1, 2, RESYNC, 5, 7, 8], accepted, new Set(), range),
    { received: 5, lost: 1, coveredByResync: 2, duplicated: 0, outOfOrder: 0, unexpected: 0 }, 'a gap after the resync is a loss')
  t.same(accountSequence([1, 2, RESYNC], accepted, new Set(), range).lost, 6, 'a resync followed by nothing covers nothing')
})

t.test('a resync whose id names an event covers up to that event, even with nothing after it', async (t) => {
  const accepted = new Set([1, 2, 3, 4, 5, 6, 7, 8])
  const range = { from: 1, to: 8 }
  // A client back after the phase's last broadcast: the resync (id of event 8) is its last arrival.
  t.same(accountSequence([1, 2, resyncThrough(8)], accepted, new Set(), range),
    { received: 2, lost: 0, coveredByResync: 6, duplicated: 0, outOfOrder: 0, unexpected: 0 })
  t.same(accountSequence([1, 2, resyncThrough(5), 7, 8], accepted, new Set(), range),
    { received: 4, lost: 1, coveredByResync: 3, duplicated: 0, outOfOrder: 0, unexpected: 0 }, 'an event after the one it names, missed, is a loss')
  t.same(accountSequence([1, 2, resyncThrough(4), 5, 6, 7, 8], accepted, new Set(), range),
    { received: 6, lost: 0, coveredByResync: 2, duplicated: 0, outOfOrder: 0, unexpected: 0 }, 'nothing missed after it')
})

t.test('per-client accounts add up across clients and processes', async (t) => {
  const one = emptyPhaseAccount()
  addAccount(one, { received: 5, lost: 1, coveredByResync: 0, duplicated: 0, outOfOrder: 2, unexpected: 0 })
  addAccount(one, { received: 6, lost: 0, coveredByResync: 0, duplicated: 3, outOfOrder: 0, unexpected: 0 })
  const other = emptyPhaseAccount()
  addAccount(other, { received: 6, lost: 2, coveredByResync: 0, duplicated: 0, outOfOrder: 0, unexpected: 0 })
  const all = addAccount(addAccount(emptyPhaseAccount(), one), other)
  t.equal(all.clients, 3)
  t.same(all.totals, { received: 17, lost: 3, coveredByResync: 0, duplicated: 3, outOfOrder: 2, unexpected: 0 })
  t.same(all.clientsWith, { lost: 2, coveredByResync: 0, duplicated: 1, outOfOrder: 1, unexpected: 0 })
})

t.test('the fan-out stamp is found in a notification\'s title', async (t) => {
  const data = JSON.stringify({ type: 'bench', title: '123456789,7', body: '', id: 'e-1' })
  const found: number[] = []
  const scanner = new StampScanner(TITLE_MARKER)
  const bytes = Buffer.from(`data: {"type":"connected","id":"c"}\n\ndata: ${data}\n\n`)
  scanner.scan(bytes.subarray(0, 30), (stamp) => found.push(stamp))
  scanner.scan(bytes.subarray(30), (stamp) => found.push(stamp))
  t.same(found, [123456789])
})

t.test('a fan-out row is the median of its rounds, with the worst share', async (t) => {
  const round = (p99Ms: number, share: number): FanoutRow => ({
    setup: 'redis', instances: 4, streams: 10, admitted: 10, perInstance: [3, 3, 2, 2], events: 5, notifyFailures: 0, share, p50Ms: p99Ms / 2, p99Ms, maxMs: p99Ms + 1, p99ByRound: []
  })
  const row = combineRounds([round(30, 1), round(10, 0.9), round(20, 1)])
  t.equal(row.p99Ms, 20)
  t.equal(row.p50Ms, 10)
  t.equal(row.maxMs, 31)
  t.equal(row.share, 0.9)
  t.same(row.p99ByRound, [30, 10, 20], 'in the order measured')
  t.equal(combineRounds([round(10, 1), round(20, 1)]).p99Ms, 15)
  t.throws(() => combineRounds([]))
})

t.test('targets are judged on the run\'s own figures: met and NOT met', async (t) => {
  const row = (setup: 'memory' | 'redis', p99Ms: number, share = 1): FanoutRow => ({
    setup, instances: setup === 'memory' ? 1 : 4, streams: 1000, admitted: 1000, perInstance: [1000], events: 5, notifyFailures: 0, share, p50Ms: 1, p99Ms, maxMs: p99Ms, p99ByRound: [p99Ms]
  })
  const kind = (lost: number): KindRow => ({
    kind: 'client',
    clients: 10,
    goneAtStart: 0,
    received: 100,
    lost,
    coveredByResync: 0,
    duplicated: 0,
    outOfOrder: 0,
    unexpected: 0,
    clientsWithLoss: lost > 0 ? 1 : 0,
    clientsWithDuplicates: 0,
    clientsOutOfOrder: 0,
    resyncs: [[0, 10]],
    resyncsReconnected: [[0, 3]],
    resyncsStayed: [[0, 7]],
    refusals: 0,
    closedForGood: 0
  })
  const chaos: ChaosResult = {
    instances: 4,
    clients: { client: 10, eventsource: 0 },
    durationS: 1,
    broadcastsPerSec: 20,
    posts: { posted: 10, accepted: 10, refused: {}, unanswered: 0 },
    kinds: [kind(0)],
    baseline: { windowS: 1, xread: 80, xrange: 0 },
    waves: [{ wave: 1, atS: 1, killedPid: 1, replacedInMs: 500, reconnects: 3, lastReconnectS: 5, windowS: 1, xrange: 4, xread: 90, xreadExcess: 10 }]
  }
  const results: ClusterResults = { plan: FULL_PLAN, finishedAt: 'now', durationS: 1, host: 'here', fanout: [row('memory', 10), row('redis', 16)], chaos, restart: null, failures: [] }
  const judged = targets(results)
  const verdict = (match: RegExp): boolean | undefined => judged.find((j) => match.test(j.target))?.met
  t.equal(verdict(/p99 with 4 instances/), false, '16 ÷ 10 = 1.6× is over 1.5×')
  t.equal(verdict(/100% of streams/), true)
  t.equal(verdict(/0 lost/), true)
  t.equal(verdict(/per reconnect wave/), true, '4 XRANGE + 10 extra XREAD = 14 ≤ 16')
  results.fanout[1] = row('redis', 15, 0.999)
  chaos.kinds = [kind(1)]
  chaos.waves[0].xreadExcess = 13
  const again = targets(results)
  t.equal(again.find((j) => /p99 with 4/.test(j.target))?.met, true, '1.5× exactly is met')
  t.equal(again.find((j) => /100% of streams/.test(j.target))?.met, false)
  t.equal(again.find((j) => /0 lost/.test(j.target))?.met, false)
  t.equal(again.find((j) => /per reconnect wave/.test(j.target))?.met, false)
  t.match(clusterMarkdown(results), /\*\*NOT met\*\*/)

  // After an empty Redis every client is told once, whether its stream stayed open or it came back.
  const restartKind = (stayed: Array<[number, number]>): KindRow => ({ ...kind(0), resyncsReconnected: [[1, 3]], resyncsStayed: stayed })
  const restart = (stayed: Array<[number, number]>): RestartResult => ({
    instances: 4,
    broadcastsPerSec: 20,
    killAtS: 5,
    outageMs: 5000,
    workerKilled: null,
    posts: { posted: 5, accepted: 5, refused: {}, unanswered: 0 },
    duringOutage: [],
    acceptedDuringOutage: 0,
    acceptedThenLost: [],
    kinds: [restartKind(stayed)],
    readAgainMs: [{ pid: 1, ms: 100, via: 'bus up again' }],
    firstAfter: null
  })
  const stayedVerdict = (stayed: Array<[number, number]>): boolean | undefined =>
    targets({ ...results, restart: restart(stayed) }).find((j) => /stream stayed open/.test(j.target))?.met
  t.equal(stayedVerdict([[1, 7]]), true, 'one resync each for the 7 open streams')
  t.equal(stayedVerdict([[0, 1], [1, 6]]), false, 'an open stream told nothing after an empty Redis is not met')
  t.equal(stayedVerdict([[1, 6], [2, 1]]), false, 'nor one told twice')
})

t.test('its redis-server: a free port, command counts, killed and started again empty', async (t) => {
  t.same(parseCommandStats('# Commandstats\r\ncmdstat_xrange:calls=3,usec=10,usec_per_call=3.3\r\ncmdstat_xread:calls=12,usec=1\r\n'), { xrange: 3, xread: 12 })
  const redis = await startRedis()
  t.teardown(() => redis.kill())
  const client = new Redis(redis.url)
  t.teardown(() => client.disconnect())
  await client.xadd('s', '*', 'f', 'v')
  const before = await redis.commandCalls()
  await client.xrange('s', '-', '+')
  await client.xrange('s', '-', '+')
  const after = await redis.commandCalls()
  t.equal(after.xrange, (before.xrange ?? 0) + 2, 'two XRANGE between two readings')
  await redis.kill()
  await redis.start()
  t.equal((await redis.commandCalls()).xrange, undefined, 'a restarted server starts its counts afresh')
  t.equal(await client.xlen('s'), 0, 'and without its data (no persistence)')
})

t.test('the fan-out pair is 1 instance vs at most one worker per CPU; more workers are a separate, oversubscribed row', async (t) => {
  t.same(fanoutCases(4, 2), [{ setup: 'memory', instances: 1 }, { setup: 'redis', instances: 2 }, { setup: 'redis', instances: 4 }])
  t.same(fanoutCases(2, 2), [{ setup: 'memory', instances: 1 }, { setup: 'redis', instances: 2 }])
  t.same(fanoutCases(4, 8), [{ setup: 'memory', instances: 1 }, { setup: 'redis', instances: 4 }])
  const row = (setup: 'memory' | 'redis', instances: number, p99Ms: number): FanoutRow => ({
    setup, instances, ...(instances > 2 ? { oversubscribed: true } : {}), streams: 1000, admitted: 1000, perInstance: [1000], events: 5, notifyFailures: 0, share: 1, p50Ms: 1, p99Ms, maxMs: p99Ms, p99ByRound: [p99Ms]
  })
  const results: ClusterResults = { plan: FULL_PLAN, finishedAt: 'now', durationS: 1, host: 'here', fanout: [row('memory', 1, 10), row('redis', 2, 12), row('redis', 4, 30)], chaos: null, restart: null, failures: [] }
  const judged = targets(results).filter((j) => /p99 with/.test(j.target))
  t.same(judged.map((j) => [j.target, j.met]), [['fan-out, 1,000 streams: p99 with 2 instances ≤ 1.5× p99 with 1', true]], 'judged on the pair, not the oversubscribed row')
  const markdown = clusterMarkdown(results)
  t.match(markdown, /## Fan-out: 1 instance \(memory bus\) vs 2 \(Redis bus/)
  t.match(markdown, /\| 4 workers, Redis bus \(oversubscribed: more workers than CPUs\) \| 1,000 \|/)
})
