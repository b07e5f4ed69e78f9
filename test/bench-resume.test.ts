import { mkdtemp, readFile, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { addCounts, NO_COUNTS, OrderLedger, violations } from '../benchmarks/resume/accounting'
import type { CompareRow } from '../benchmarks/resume/compare'
import { FULL_PLAN, parseArgs, QUICK_PLAN } from '../benchmarks/resume/plan'
import { memoryRatio, resumeChecks, resumeMarkdown, writeResumeReport, type ResumeResults, type ThroughputRow } from '../benchmarks/resume/report'
import { parseFrame, SseResponseReader, tokenData, tokenNumber, type SseFrame } from '../benchmarks/resume/sse-reader'

// bench:resume's pure parts: its arguments, the raw-socket response reader, the "once, in order"
// accounting and the report. Nothing here measures speed or starts a process.

t.test('plans and arguments: the brief\'s cases by default, filters that say what they narrow, errors that name the argument', async (t) => {
  t.same(FULL_PLAN.throughput.answers, [1, 100, 1000])
  t.same(FULL_PLAN.phases, ['throughput', 'resume', 'memory', 'compare'])
  t.same([FULL_PLAN.compare.tokens, FULL_PLAN.compare.killAt], [2000, 1000])
  t.equal(parseArgs(['--quick']).plan.name, 'quick')
  t.same(parseArgs(['--quick']).plan.throughput.answers, QUICK_PLAN.throughput.answers)
  t.equal(parseArgs([]).targeted, false)
  t.equal(parseArgs(['--out=/tmp/x']).targeted, false, 'only where it goes: still the whole plan')
  const narrow = parseArgs(['--phases=compare,resume', '--answers=5,50', '--tokens=30', '--token-bytes=64', '--logs=memory', '--resume-answers=7', '--wait-ms=3000'])
  t.same([narrow.plan.phases, narrow.plan.throughput.answers, narrow.plan.throughput.tokens, narrow.plan.tokenBytes, narrow.plan.throughput.logs, narrow.plan.resume.answers, narrow.plan.resume.cuts, narrow.plan.compare.waitMs, narrow.targeted],
    [['compare', 'resume'], [5, 50], 30, 64, ['memory'], 7, 7, 3000, true])
  t.same(FULL_PLAN.throughput.answers, [1, 100, 1000], 'the frozen plan is not touched')
  t.throws(() => parseArgs(['--phases=speed']), /--phases: unknown "speed"; known: throughput, resume, memory, compare/)
  t.throws(() => parseArgs(['--answers=0']), /--answers takes comma-separated integers 1-5000, got "0"/)
  t.throws(() => parseArgs(['--fast']), /unknown or malformed argument "--fast"/)
  t.equal(parseArgs(['--help']).help, true)
  for (const plan of [FULL_PLAN, QUICK_PLAN]) {
    const r = plan.resume
    t.ok(r.cutFromMs + (r.cuts - 1) * r.cutEveryMs + r.gapMs < r.tokens * r.everyMs, `${plan.name}: every cut and its reconnect fall while the answers are in flight`)
    t.ok(r.gapMs >= 2 * r.everyMs, `${plan.name}: a reconnect has missed tokens waiting for it`)
    t.ok(plan.compare.followAt < plan.compare.killAt && plan.compare.killAt < plan.compare.tokens, `${plan.name}: follow, then the kill, mid-answer`)
  }
})

const TOWER = 'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\nconnection: close\r\n\r\n' +
  'retry: 5261\n\nid: r.abc.1.seal\ndata: 0 xx\n\nid: r.abc.2.seal\ndata: 1 xx\n\n: a comment\n\nid: r.abc.end.seal\nevent: end\ndata: {}\n\nretry: 4749\n\n'

function feed (reader: SseResponseReader, text: string, step: number): SseFrame[] {
  const frames: SseFrame[] = []
  for (let i = 0; i < text.length; i += step) frames.push(...reader.push(text.slice(i, i + step)))
  return frames
}

t.test('the response reader: a close-delimited stream read in any split, frames and the offset to resume from', async (t) => {
  for (const step of [1, 7, TOWER.length]) {
    const reader = new SseResponseReader()
    const frames = feed(reader, TOWER, step)
    t.equal(reader.status, 200)
    t.same(frames, [{ retry: 5261 }, { id: 'r.abc.1.seal', data: '0 xx' }, { id: 'r.abc.2.seal', data: '1 xx' }, { id: 'r.abc.end.seal', event: 'end', data: '{}' }, { retry: 4749 }], `split every ${step}`)
    t.equal(reader.consumed, TOWER.length - TOWER.indexOf('\r\n\r\n') - 4, 'every body character consumed, frame by frame')
    t.equal(reader.done, false, 'close-delimited: over only at the close')
  }
  const partial = new SseResponseReader()
  partial.push('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 0\n\ndata: 1')
  t.equal(partial.consumed, 'data: 0\n\n'.length, 'a frame not complete is not consumed')
})

t.test('the response reader: a chunked body (node:http\'s default) decoded across splits; complete at its last chunk', async (t) => {
  const body = 'data: 0 x\n\ndata: 1 x\n\n'
  const chunks = ['data: 0', ' x\n\nda', 'ta: 1 x\n\n']
  const text = 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n' +
    chunks.map((c) => `${c.length.toString(16)}\r\n${c}\r\n`).join('') + '0\r\n\r\n'
  for (const step of [1, 5, text.length]) {
    const reader = new SseResponseReader()
    t.same(feed(reader, text, step), [{ data: '0 x' }, { data: '1 x' }], `split every ${step}`)
    t.equal(reader.consumed, body.length, 'the offset counts body characters, not chunk framing')
    t.equal(reader.done, true)
  }
})

t.test('the response reader: a refusal is kept as text and complete by its length; a 204 at once', async (t) => {
  const error = new SseResponseReader()
  t.same(error.push('HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: 21\r\n\r\nInternal Server'), [])
  t.equal(error.done, false)
  error.push(' Error')
  t.same([error.status, error.plain, error.done], [500, 'Internal Server Error', true])
  const none = new SseResponseReader()
  none.push('HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n')
  t.same([none.status, none.done], [204, true])
})

t.test('frames and tokens: fields as the spec reads them; a token\'s number survives its padding', async (t) => {
  t.same(parseFrame('id: x\nevent: error\ndata: {"code":"C"}'), { id: 'x', event: 'error', data: '{"code":"C"}' })
  t.same(parseFrame('data: a\ndata: b\nretry: soon'), { data: 'a\nb' }, 'data lines joined; a retry that is not digits ignored')
  t.same(parseFrame('data:tight'), { data: 'tight' })
  t.equal(parseFrame(': only a comment'), null)
  t.equal(tokenData(7, 16).length, 16)
  t.equal(tokenData(123456, 4), '123456', 'never shorter than its number')
  t.same([tokenNumber(tokenData(1234, 16)), tokenNumber('x'), tokenNumber('')], [1234, -1, -1])
})

t.test('once, in order: each kind of violation counted, and none for an answer read whole across a cut', async (t) => {
  const whole = new OrderLedger(5)
  for (const n of [0, 1, 2]) whole.add(n)
  t.equal(whole.last, 2, 'where a resume asks from')
  for (const n of [3, 4]) whole.add(n)
  whole.end()
  t.same(whole.counts(), { ...NO_COUNTS, answers: 1, delivered: 5 })
  t.equal(violations(whole.counts()), 0)

  const replayed = new OrderLedger(5)
  for (const n of [0, 1, 2, 2, 3, 4]) replayed.add(n)
  replayed.end()
  t.same(replayed.counts(), { ...NO_COUNTS, answers: 1, delivered: 5, duplicates: 1 }, 'a token the resume sent again')

  const late = new OrderLedger(5)
  for (const n of [0, 2, 1, 3]) late.add(n)
  late.end()
  t.same(late.counts(), { ...NO_COUNTS, answers: 1, delivered: 4, outOfOrder: 1, missing: 1 }, 'one arrived late, the last never')

  const skipped = new OrderLedger(6)
  for (const n of [0, 4, 5, 5, 9, -1]) skipped.add(n)
  skipped.add(Number.NaN)
  t.same(skipped.counts(), { ...NO_COUNTS, answers: 1, delivered: 3, duplicates: 1, missing: 3, unexpected: 3, unended: 1 }, 'a gap of three, numbers outside the answer, no end')

  const after = new OrderLedger(1)
  after.add(0)
  after.end()
  after.add(0)
  after.end()
  t.same(after.counts(), { ...NO_COUNTS, answers: 1, delivered: 1, unexpected: 2 }, 'anything after the end is unexpected')

  const sum = [whole, replayed, late, skipped].map((l) => l.counts()).reduce(addCounts, { ...NO_COUNTS })
  t.same(sum, { answers: 4, delivered: 17, duplicates: 2, outOfOrder: 1, missing: 4, unexpected: 3, unended: 1 })
  t.equal(violations(sum), 11)
})

function throughputRow (log: ThroughputRow['log'], answers: number, tokensPerSec: number, tokensPerCpuS: number): ThroughputRow {
  return {
    log,
    answers,
    tokensPerAnswer: 100,
    tokenBytes: 16,
    started: 10,
    completed: 10,
    refused: 0,
    resumes: 0,
    tokens: 1000,
    seconds: 1,
    tokensPerSec,
    instanceCpuS: 0.5,
    tokensPerCpuS,
    redisCpuS: log === 'redis' ? 0.25 : null,
    redisCorePct: log === 'redis' ? 25 : null,
    tokensPerCpuSWithRedis: log === 'redis' ? 1333 : null,
    clientCpuS: 0.1,
    counts: { ...NO_COUNTS, answers: 10, delivered: 1000 },
    failures: {}
  }
}

function compareRow (library: CompareRow['library'], scenario: CompareRow['scenario'], told: string | null, toldAfterMs: number | null, outcome: CompareRow['outcome']): CompareRow {
  return {
    library,
    scenario,
    tokens: 2000,
    killAt: 1000,
    beforeKill: 999,
    afterKill: 1,
    total: 1000,
    duplicates: 0,
    outOfOrder: 0,
    told,
    toldAfterMs,
    outcome,
    endedAfterMs: outcome === 'ended' ? toldAfterMs : null,
    waitMs: 25_000,
    producedP: 1,
    producedQ: 0,
    serverErrors: library === 'resumable-stream' && told !== null ? ['Timeout waiting for ack'] : []
  }
}

t.test('the report: ratios to the memory log of the same run, the checks, every table, the files', async (t) => {
  const throughput = [throughputRow('redis', 1, 5000, 10_000), throughputRow('memory', 1, 10_000, 20_000), throughputRow('redis', 100, 8000, 16_000), throughputRow('memory', 100, 16_000, 40_000)]
  t.equal(memoryRatio(throughput, throughput[0], 'tokensPerSec'), 0.5)
  t.equal(memoryRatio(throughput, throughput[2], 'tokensPerCpuS'), 0.4)
  t.equal(memoryRatio(throughput, throughput[1], 'tokensPerSec'), null, 'the baseline has no ratio')
  t.equal(memoryRatio(throughput.slice(0, 1), throughput[0], 'tokensPerSec'), null, 'no baseline, no ratio')
  const compare = [
    compareRow('tower-sse', 'reconnect', 'event: error {"code":"TOWER_SSE_PRODUCER_LOST"}', 5600, 'ended'),
    compareRow('resumable-stream', 'reconnect', 'HTTP 500 Internal Server Error', 1060, 'ended'),
    compareRow('tower-sse', 'follow', 'event: error {"code":"TOWER_SSE_PRODUCER_LOST"}', 6400, 'ended'),
    compareRow('resumable-stream', 'follow', null, null, 'hung')
  ]
  const resume = {
    answers: 100,
    tokensPerAnswer: 2000,
    everyMs: 5,
    gapMs: 50,
    cuts: 100,
    resumed: 100,
    skipped: 0,
    firstNotNext: 0,
    p50Ms: 3.2,
    p99Ms: 9.8,
    maxMs: 12,
    counts: { ...NO_COUNTS, answers: 100, delivered: 200_000 },
    cutCounts: { ...NO_COUNTS, answers: 100, delivered: 200_000 },
    failures: {}
  }
  const checks = resumeChecks({ throughput, resume, compare })
  t.same(checks.map((c) => c.met), [true, true, true, false], 'the follow row told after 6.4 s: not within 6 s')
  t.match(checks[1].measured, /100 of 100 cuts resumed on B; 0 violations over 100 answers/)
  const broken = resumeChecks({ throughput: [{ ...throughputRow('redis', 1, 1, 1), completed: 9, refused: 2, resumes: 1, counts: { ...NO_COUNTS, answers: 10, delivered: 990, missing: 10, unended: 1 } }], resume: { ...resume, firstNotNext: 1 }, compare: [] })
  t.same(broken.map((c) => c.met), [false, false])
  t.match(broken[0].measured, /redis × 1: 2 refused, 1 incomplete, 11 violations/)

  const results: ResumeResults = {
    finishedAt: '2026-12-03T12:00:00.000Z',
    durationS: 300,
    redisVersion: '7.0.15',
    nodeVersion: '20.20.2',
    resumableStreamVersion: '2.2.13',
    machine: { cpus: 2, loadBefore: [0.2, 0.1, 0.1], loadAfter: [1, 0.5, 0.2] },
    machineNote: null,
    plan: { ...FULL_PLAN },
    throughput,
    resume,
    compare,
    checks,
    memory: {
      answers: 1000,
      tokensPerAnswer: 1000,
      tokenBytes: 16,
      completed: 1000,
      usedMemoryBefore: 1_000_000,
      usedMemoryAfter: 50_000_000,
      bytesPerAnswer: 49_000,
      bytesPerToken: 49,
      keysBefore: 3,
      keysAfter: 2003,
      keysPerAnswer: 2,
      answerKeysPerAnswer: 2,
      sampled: { answers: 20, bytesPerAnswer: 48_500 }
    }
  }
  const markdown = resumeMarkdown(results)
  t.match(markdown, /^# Resumable answers \(full run, 2026-12-03\)/)
  t.match(markdown, /\| redis \| 1 \| 10 \| 1,000 \| 1\.00 \| 5,000 \| ×0\.50 \| 0\.50 \| 10,000 \| ×0\.50 \| 0\.25 \(25%\) \| 1,333 \| 0 \|/)
  t.match(markdown, /\| 100 \| 5 ms \| 100 of 100 \| 3\.2 \| 9\.8 \| 12 \| 0 \| 0 \| 0 \|/)
  t.match(markdown, /\| 1,000 \| 1,000 \| 1,000,000 \| 50,000,000 \| 49,000 \| 49\.0 \| 16 \| 48,500 \| 2\.00 \| 2\.00 \|/)
  t.match(markdown, /\| follow \| resumable-stream \| 999 \| 1 \| 1,000 \| nothing \| \*\*hangs\*\* \(open 25 s after the kill\) \| 1 \/ 0 \|/)
  t.match(markdown, /\| reconnect \| resumable-stream \| .* \| `HTTP 500 Internal Server Error` after 1\.1 s \| ended after 1\.1 s \| 1 \/ 0 \| Timeout waiting for ack \|/)
  t.match(markdown, /\*\*NOT met\*\*/)
  t.match(resumeMarkdown({ ...results, throughput: [{ ...throughputRow('redis', 1, 1, 1), completed: 9, refused: 2, resumes: 1 }] }), /\| redis \| 1 \| 9 \(1 incomplete, 2 refused, 1 resumes\) \|/)

  const dir = await mkdtemp(path.join(os.tmpdir(), 'bench-resume-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  t.equal(await writeResumeReport(dir, results), markdown)
  t.same(JSON.parse(await readFile(path.join(dir, 'resume.json'), 'utf8')), results)
  t.equal(await readFile(path.join(dir, 'resume.md'), 'utf8'), markdown + '\n')
  t.match(await readFile(path.join(dir, 'resume.svg'), 'utf8'), /^<svg[^>]*>[\s\S]*tokens\/s per instance core/)
})
