import type { TopLevelSpec } from 'vega-lite'
import type { MachineLoad } from '../lib/machine-load'
import { markdownTable } from '../lib/markdown-table'
import { writeResults, type Target } from '../lib/results-files'
import { vegaLiteSvg } from '../lib/vega-svg'
import { violations, type OrderCounts } from './accounting'
import type { CompareRow } from './compare'
import type { LogKind, ResumePlan } from './plan'

/** One case of the throughput phase: `answers` concurrent answers on one instance, their log in Redis or in the process. */
export interface ThroughputRow {
  log: LogKind
  answers: number
  tokensPerAnswer: number
  tokenBytes: number
  /** Answers admitted (a 200 stream), and those of them that ended with `event: end`. */
  started: number
  completed: number
  /** Answers refused before they started (a 503, say), not retried; and reconnects with a Last-Event-ID after a stream closed before its end. */
  refused: number
  resumes: number
  /** Tokens the clients received (each once), over the case. */
  tokens: number
  /** First request → last answer's close. */
  seconds: number
  tokensPerSec: number
  /** The instance's CPU over the case, read inside it (process.cpuUsage). */
  instanceCpuS: number
  /** Tokens ÷ instance CPU seconds: tokens per second per core of the instance. */
  tokensPerCpuS: number
  /** Redis's CPU over the case (INFO used_cpu_user + used_cpu_sys), and the share of one core it is; null for the memory log. */
  redisCpuS: number | null
  redisCorePct: number | null
  /** Tokens ÷ (instance + Redis CPU seconds). */
  tokensPerCpuSWithRedis: number | null
  clientCpuS: number
  counts: OrderCounts
  failures: Record<string, number>
}

/** The resume phase: answers in flight on A, a sample cut and resumed on B. */
export interface ResumeRow {
  answers: number
  tokensPerAnswer: number
  everyMs: number
  gapMs: number
  cuts: number
  resumed: number
  skipped: number
  /** Resumes whose first token was not the one after the last received: a violation too. */
  firstNotNext: number
  /** Reconnect's request → its first missed token. */
  p50Ms: number
  p99Ms: number
  maxMs: number
  counts: OrderCounts
  cutCounts: OrderCounts
  failures: Record<string, number>
}

/** Redis's memory and keys before and after `answers` finished answers (kept for their ttl). */
export interface MemoryRow {
  answers: number
  tokensPerAnswer: number
  tokenBytes: number
  completed: number
  usedMemoryBefore: number
  usedMemoryAfter: number
  bytesPerAnswer: number
  bytesPerToken: number
  keysBefore: number
  keysAfter: number
  keysPerAnswer: number
  /** The keys under the answers' own tags (`{<key>:r:<id>}:…`), per answer. */
  answerKeysPerAnswer: number
  /** MEMORY USAGE of every key of a sample of answers, per answer (a cross-check of the INFO difference). */
  sampled: { answers: number, bytesPerAnswer: number }
}

export interface ResumeResults {
  finishedAt: string
  durationS: number
  redisVersion: string
  nodeVersion: string
  resumableStreamVersion: string
  machine: MachineLoad
  /** Why the figures may not be comparable (the run started on a busy machine), or null. */
  machineNote: string | null
  plan: ResumePlan
  throughput: ThroughputRow[]
  resume: ResumeRow | null
  memory: MemoryRow | null
  compare: CompareRow[]
  checks: Target[]
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US')
const fixed = (n: number, digits: number): string => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })

/** `field` of a Redis row ÷ the same of the memory row with as many answers, in the same run; null without both. */
export function memoryRatio (rows: readonly ThroughputRow[], row: ThroughputRow, field: 'tokensPerSec' | 'tokensPerCpuS'): number | null {
  if (row.log !== 'redis') return null
  const memory = rows.find((r) => r.log === 'memory' && r.answers === row.answers && r.tokensPerAnswer === row.tokensPerAnswer)
  if (memory === undefined || memory[field] === 0) return null
  return row[field] / memory[field]
}

function countsText (counts: OrderCounts): string {
  const parts = (['duplicates', 'outOfOrder', 'missing', 'unexpected', 'unended'] as const).filter((k) => counts[k] > 0).map((k) => `${k} ${int(counts[k])}`)
  return parts.length === 0 ? '0' : `**${int(violations(counts))}** (${parts.join(', ')})`
}

function failuresText (failures: Record<string, number>): string {
  const entries = Object.entries(failures)
  return entries.length === 0 ? '' : entries.map(([what, n]) => `${what}: ${int(n)}`).join('; ')
}

/** The run's checks: every token once and in order (throughput and across the cut), and tower-sse telling its client of a killed producer. */
export function resumeChecks (results: Pick<ResumeResults, 'throughput' | 'resume' | 'compare'>): Target[] {
  const checks: Target[] = []
  if (results.throughput.length > 0) {
    const bad = results.throughput.filter((r) => violations(r.counts) > 0 || r.completed !== r.started || r.refused > 0)
    checks.push({
      target: 'throughput: every answer admitted and complete, every token once and in order',
      measured: bad.length === 0
        ? `${int(results.throughput.reduce((sum, r) => sum + r.completed, 0))} answers, 0 violations`
        : bad.map((r) => `${r.log} × ${int(r.answers)}: ${int(r.refused)} refused, ${int(r.started - r.completed)} incomplete, ${int(violations(r.counts))} violations`).join('; '),
      met: bad.length === 0
    })
  }
  if (results.resume !== null) {
    const r = results.resume
    const total = violations(r.counts) + r.firstNotNext
    checks.push({
      target: 'resume: every event once, in order, across the cut (violations = 0)',
      measured: `${int(r.resumed)} of ${int(r.cuts)} cuts resumed on B; ${int(total)} violations over ${int(r.counts.answers)} answers`,
      met: total === 0 && r.resumed === r.cuts
    })
  }
  for (const row of results.compare.filter((c) => c.library === 'tower-sse')) {
    checks.push({
      target: `tower-sse, ${row.scenario}: a killed producer told as \`error\` TOWER_SSE_PRODUCER_LOST within 6 s, the response ended`,
      measured: `${row.told ?? 'nothing told'}${row.toldAfterMs === null ? '' : ` after ${fixed(row.toldAfterMs / 1000, 1)} s`}; ${row.outcome}`,
      met: row.told !== null && row.told.includes('TOWER_SSE_PRODUCER_LOST') && row.toldAfterMs !== null && row.toldAfterMs <= 6000 && row.outcome === 'ended'
    })
  }
  return checks
}

export function resumeMarkdown (results: ResumeResults): string {
  const { plan, machine } = results
  const out = [`# Resumable answers (${plan.name} run, ${results.finishedAt.slice(0, 10)})`, '']
  out.push(`redis-server ${results.redisVersion} on loopback, no persistence; Node ${results.nodeVersion}; resumable-stream ${results.resumableStreamVersion}. Each tower-sse instance is its own process (Fastify, \`POST /answer\` streaming \`subscribe({ stream, resumable })\`); the clients are raw sockets in a client process of their own, one per answer, each checking its tokens once and in order. Tokens are ${int(plan.tokenBytes)} bytes of data.`, '')
  out.push(`Machine: ${machine.cpus} CPUs, load average ${machine.loadBefore.join(' / ')} before, ${(machine.loadAfter ?? []).join(' / ')} after (1/5/15 min); Redis, the instances and the clients share them.${results.machineNote === null ? '' : ` ${results.machineNote}.`}`, '')

  if (results.throughput.length > 0) {
    const t = plan.throughput
    out.push('## Tokens through the log', '')
    out.push(`Concurrent answers of ${int(t.tokens)} tokens each, produced as fast as the log takes them, on one instance: each slot runs answers back to back until the case has made about ${int(t.tokensPerCase)} tokens (none started after ${fixed(t.maxMs / 1000, 0)} s), after ${int(t.warmupAnswers)} unmeasured answers. \`redis\`: the Redis bus (a Redis Stream per answer); \`memory\`: no \`redis\` option, the log in the process — the baseline, same run. Tokens/s per core = tokens ÷ the instance's CPU seconds (process.cpuUsage inside it); Redis's CPU is INFO's used_cpu_user + used_cpu_sys over the case.`, '')
    out.push(markdownTable(
      ['log', 'concurrent answers', 'answers', 'tokens', 's', 'tokens/s', '× memory', 'instance CPU s', 'tokens/s per core', '× memory', 'Redis CPU s (% of a core)', 'tokens per CPU-s, instance + Redis', 'violations'],
      results.throughput.map((r) => {
        const perSec = memoryRatio(results.throughput, r, 'tokensPerSec')
        const perCore = memoryRatio(results.throughput, r, 'tokensPerCpuS')
        const notes = [[r.started - r.completed, 'incomplete'], [r.refused, 'refused'], [r.resumes, 'resumes']].filter(([n]) => Number(n) > 0).map(([n, what]) => `${int(Number(n))} ${String(what)}`)
        return [r.log, int(r.answers), `${int(r.completed)}${notes.length > 0 ? ` (${notes.join(', ')})` : ''}`, int(r.tokens), fixed(r.seconds, 2), int(r.tokensPerSec),
          perSec === null ? '' : `×${perSec.toFixed(2)}`, fixed(r.instanceCpuS, 2), int(r.tokensPerCpuS), perCore === null ? '' : `×${perCore.toFixed(2)}`,
          r.redisCpuS === null ? '' : `${fixed(r.redisCpuS, 2)} (${int(r.redisCorePct ?? 0)}%)`, r.tokensPerCpuSWithRedis === null ? '' : int(r.tokensPerCpuSWithRedis), countsText(r.counts)]
      }),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'left']
    ), '')
    const failed = results.throughput.filter((r) => Object.keys(r.failures).length > 0)
    for (const r of failed) out.push(`- ${r.log} × ${int(r.answers)}: ${failuresText(r.failures)}`)
    if (failed.length > 0) out.push('')
  }

  if (results.resume !== null) {
    const r = results.resume
    out.push('## Resume latency', '')
    out.push(`Two instances, A and B, on the one Redis. ${int(r.answers)} answers of ${int(r.tokensPerAnswer)} tokens, one token every ${r.everyMs} ms, in flight on A; ${int(r.cuts)} of their connections cut (the socket destroyed) one by one, each reconnected on B ${r.gapMs} ms later with its Last-Event-ID. Timed from the reconnect's request (its connect) to its first token, the first one it missed. Every answer's tokens, across the cut, are checked once and in order.`, '')
    out.push(markdownTable(
      ['answers in flight', 'token every', 'cuts resumed', 'p50 ms', 'p99 ms', 'max ms', 'first token not the next', 'violations, cut answers', 'violations, all answers'],
      [[int(r.answers), `${r.everyMs} ms`, `${int(r.resumed)} of ${int(r.cuts)}${r.skipped > 0 ? ` (${int(r.skipped)} not cut)` : ''}`, String(r.p50Ms), String(r.p99Ms), String(r.maxMs), int(r.firstNotNext), countsText(r.cutCounts), countsText(r.counts)]],
      ['right', 'right', 'right', 'right', 'right', 'right', 'right', 'left', 'left']
    ), '')
    if (Object.keys(r.failures).length > 0) out.push(`Failures: ${failuresText(r.failures)}`, '')
  }

  if (results.memory !== null) {
    const m = results.memory
    out.push('## Redis memory per answer', '')
    out.push(`${int(m.answers)} answers of ${int(m.tokensPerAnswer)} tokens (${int(m.tokenBytes)} bytes of data each), run to their end, ${int(plan.memory.concurrency)} at a time, and kept for their ttl: INFO memory's used_memory and DBSIZE before and after, divided by the answers. MEMORY USAGE of every key of ${int(m.sampled.answers)} of them is the cross-check.`, '')
    out.push(markdownTable(
      ['answers', 'tokens each', 'used_memory before', 'after', 'bytes per answer', 'bytes per token', 'data bytes per token', 'MEMORY USAGE per answer (sample)', 'keys per answer', 'keys under the answers\' tags, per answer'],
      [[int(m.answers), int(m.tokensPerAnswer), int(m.usedMemoryBefore), int(m.usedMemoryAfter), int(m.bytesPerAnswer), fixed(m.bytesPerToken, 1), int(m.tokenBytes), int(m.sampled.bytesPerAnswer), fixed(m.keysPerAnswer, 2), fixed(m.answerKeysPerAnswer, 2)]],
      ['right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right']
    ), '')
  }

  if (results.compare.length > 0) {
    const c = plan.compare
    out.push('## Beside resumable-stream: the producer killed', '')
    out.push(`The same producer (${int(c.tokens)} tokens, one every ${c.everyMs} ms) through tower-sse (the Redis bus) and through Vercel's \`resumable-stream\` (as its README uses it: \`resumableStream(id, makeStream, resumeAt)\` from \`resumable-stream/ioredis\`, \`waitUntil: null\`; a route whose await rejects answers 500), each on two processes, P and Q, sharing the Redis. The producer on P holds at token ${int(c.killAt)} and P is SIGKILLed there. \`reconnect\`: the client was reading P; when its connection dies it reconnects to Q at once with its position (tower-sse: Last-Event-ID; resumable-stream: the characters it has, \`resumeAt\`). \`follow\`: the client had moved to Q at token ${int(c.followAt)}, and follows P's answer from there when P dies. The client waits ${fixed(c.waitMs / 1000, 0)} s after the kill.`, '')
    out.push(markdownTable(
      ['scenario', 'library', 'tokens before the kill', 'after the kill', 'total (of ' + int(c.killAt) + ' made)', 'told', 'ends', 'factory runs P / Q', 'resuming process\'s errors'],
      results.compare.map((r) => [r.scenario, r.library, int(r.beforeKill), int(r.afterKill),
        `${int(r.total)}${r.duplicates + r.outOfOrder > 0 ? ` (${r.duplicates} duplicates, ${r.outOfOrder} out of order)` : ''}`,
        r.told === null ? 'nothing' : `\`${r.told}\`${r.toldAfterMs === null ? '' : ` after ${fixed(r.toldAfterMs / 1000, 1)} s`}`,
        r.outcome === 'ended' ? `ended after ${fixed((r.endedAfterMs ?? 0) / 1000, 1)} s` : `**hangs** (open ${fixed(r.waitMs / 1000, 0)} s after the kill)`,
        `${r.producedP} / ${r.producedQ}`, r.serverErrors.length === 0 ? '' : [...new Set(r.serverErrors)].join('; ')]),
      ['left', 'left', 'right', 'right', 'right', 'left', 'left', 'right', 'left']
    ), '')
  }

  if (results.checks.length > 0) {
    out.push('## Checks', '', markdownTable(['check', 'measured (this run)', 'met'], results.checks.map((t) => [t.target, t.measured, t.met ? 'met' : '**NOT met**']), ['left', 'left', 'left']))
  }
  return out.join('\n')
}

export async function resumeChart (rows: readonly ThroughputRow[]): Promise<string> {
  const values = rows.map((r) => ({ answers: int(r.answers), order: r.answers, log: r.log, tokensPerSec: r.tokensPerSec, tokensPerCpuS: r.tokensPerCpuS }))
  const bars = (field: string, title: string) => ({
    width: 240,
    mark: 'bar' as const,
    encoding: {
      x: { field: 'answers', type: 'nominal' as const, title: 'concurrent answers', sort: { field: 'order' }, axis: { labelAngle: 0 } },
      xOffset: { field: 'log' },
      y: { field, type: 'quantitative' as const, title },
      color: { field: 'log', type: 'nominal' as const, title: 'log' }
    }
  })
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: 'Resumable answers: tokens through the log, Redis vs memory',
    data: { values },
    hconcat: [bars('tokensPerSec', 'tokens/s delivered'), bars('tokensPerCpuS', 'tokens/s per instance core')]
  }
  return await vegaLiteSvg(spec)
}

export async function writeResumeReport (dir: string, results: ResumeResults): Promise<string> {
  const markdown = resumeMarkdown(results)
  writeResults(dir, 'resume', results, markdown, results.throughput.length > 0 ? await resumeChart(results.throughput) : null)
  return markdown
}
