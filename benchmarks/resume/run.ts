/**
 * `npm run bench:resume [-- --quick]`: resumable answers (`subscribe({ stream, resumable })`) on the
 * Redis bus. Tokens/s and tokens/s per core through the Redis log for 1, 100 and 1,000 concurrent
 * answers beside the memory log; resume latency from instance A to instance B, with every token
 * checked once and in order across the cut; Redis memory and keys per finished answer; and the
 * same producer killed mid-answer through tower-sse and Vercel's `resumable-stream`. Results go to
 * benchmarks/results/resume.{json,md,svg} (a quick or targeted run's to benchmarks/results/tmp/).
 * Everything runs on 127.0.0.1, in processes this run starts and ends.
 */
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { startRedis } from '../lib/redis-server'
import { Histogram } from '../lib/histogram'
import { IpcClient } from '../lib/ipc'
import { endLoadRecord } from '../lib/machine-load'
import { startBenchRun } from '../lib/bench-run'
import { spawnSibling } from '../lib/spawn-sibling'
import type { AnswersReply, ResumeReply } from './client'
import { runCompare } from './compare'
import type { StartReply } from './instance'
import { parseArgs, USAGE, type LogKind, type ResumePlan } from './plan'
import { resumeChecks, writeResumeReport, type MemoryRow, type ResumeResults, type ResumeRow, type ThroughputRow } from './report'

export type Log = (line: string) => void
const logToStderr: Log = (line) => process.stderr.write(`[resume] ${line}\n`)

const START_MS = 30_000
const REQUEST_MS = 15_000
/** Answers of the throughput and memory phases are kept this long after their end (the plugin's default is 10 minutes). */
const TTL_MS = 10 * 60_000
let keys = 0

const round = (n: number, digits = 3): number => Number(n.toFixed(digits))

/** The run's one Redis, read from a connection of the runner's own. */
export class RedisStats {
  private readonly client: Redis

  constructor (readonly url: string) {
    this.client = new Redis(url, { maxRetriesPerRequest: 1 })
    this.client.on('error', () => {})
  }

  private async info (section: string): Promise<Record<string, string>> {
    const text = await this.client.info(section)
    return Object.fromEntries(text.split('\r\n').filter((line) => line.includes(':')).map((line) => line.split(/:(.*)/s, 2) as [string, string]))
  }

  /** Redis's CPU so far, user + system, in seconds. */
  async cpuS (): Promise<number> {
    const cpu = await this.info('cpu')
    return Number(cpu.used_cpu_user) + Number(cpu.used_cpu_sys)
  }

  async usedMemory (): Promise<number> {
    return Number((await this.info('memory')).used_memory)
  }

  async version (): Promise<string> {
    return (await this.info('server')).redis_version ?? 'unknown'
  }

  async dbsize (): Promise<number> {
    return await this.client.dbsize()
  }

  async flush (): Promise<void> {
    await this.client.flushall('SYNC')
  }

  /** Every key matching `pattern` (SCAN, so never a blocking KEYS). */
  async scan (pattern: string): Promise<string[]> {
    const found: string[] = []
    let cursor = '0'
    do {
      const [next, batch] = await this.client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
      cursor = next
      found.push(...batch)
    } while (cursor !== '0')
    return found
  }

  async memoryUsage (key: string): Promise<number> {
    return Number(await this.client.call('MEMORY', 'USAGE', key, 'SAMPLES', '0') ?? 0)
  }

  close (): void {
    this.client.disconnect()
  }
}

async function closeAll (clients: IpcClient[]): Promise<void> {
  await Promise.all(clients.map(async (client) => {
    await client.request({ type: 'close' }, REQUEST_MS).catch(() => {})
    await client.exit()
  }))
}

async function startInstance (label: string, key: string, redisUrl: string | null): Promise<{ instance: IpcClient, port: number }> {
  const instance = new IpcClient(spawnSibling(__filename, 'instance'), label)
  const { port } = await instance.request<StartReply>({ type: 'start', key, ttlMs: TTL_MS, ...(redisUrl === null ? {} : { redis: redisUrl }) }, START_MS)
  return { instance, port }
}

/** One throughput case in fresh processes (a flushed Redis for the Redis log): warm-up, then the measured answers. */
export async function throughputCase (stats: RedisStats, plan: ResumePlan, log: LogKind, answers: number, say: Log): Promise<ThroughputRow> {
  const { tokens, tokensPerCase, maxMs, warmupAnswers } = plan.throughput
  const bytes = plan.tokenBytes
  if (log === 'redis') await stats.flush()
  const client = new IpcClient(spawnSibling(__filename, 'client'), 'client')
  const processes = [client]
  try {
    const { instance, port } = await startInstance(`instance (${log})`, `resume-bench-${process.pid}-${++keys}`, log === 'redis' ? stats.url : null)
    processes.push(instance)
    const ask = (slots: number, perSlot: number, ms: number): Promise<AnswersReply> => client.request<AnswersReply>(
      { type: 'answers', port, answers: slots, perSlot, tokens, bytes, maxMs: ms, timeoutMs: plan.answerTimeoutMs }, ms + plan.answerTimeoutMs + REQUEST_MS)
    if (warmupAnswers > 0) {
      const slots = Math.min(answers, warmupAnswers)
      await ask(slots, Math.ceil(warmupAnswers / slots), maxMs)
    }
    const cpuBefore = await instance.request<number>({ type: 'cpu' }, REQUEST_MS)
    const redisBefore = log === 'redis' ? await stats.cpuS() : null
    const reply = await ask(answers, Math.max(1, Math.ceil(tokensPerCase / (answers * tokens))), maxMs)
    const cpuAfter = await instance.request<number>({ type: 'cpu' }, REQUEST_MS)
    const redisCpuS = redisBefore === null ? null : round(await stats.cpuS() - redisBefore)
    const seconds = reply.elapsedMs / 1000
    const instanceCpuS = (cpuAfter - cpuBefore) / 1e6
    const row: ThroughputRow = {
      log,
      answers,
      tokensPerAnswer: tokens,
      tokenBytes: bytes,
      started: reply.started,
      completed: reply.completed,
      refused: reply.refused,
      resumes: reply.resumes,
      tokens: reply.tokens,
      seconds: round(seconds),
      tokensPerSec: Math.round(reply.tokens / seconds),
      instanceCpuS: round(instanceCpuS),
      tokensPerCpuS: Math.round(reply.tokens / instanceCpuS),
      redisCpuS,
      redisCorePct: redisCpuS === null ? null : round(100 * redisCpuS / seconds, 1),
      tokensPerCpuSWithRedis: redisCpuS === null ? null : Math.round(reply.tokens / (instanceCpuS + redisCpuS)),
      clientCpuS: round(reply.cpuUs / 1e6),
      counts: reply.counts,
      failures: reply.failures
    }
    say(`${log} × ${answers} answers: ${row.completed}/${row.started} answers${row.refused > 0 ? ` (${row.refused} refused)` : ''}${row.resumes > 0 ? `, ${row.resumes} resumes` : ''}, ${row.tokens} tokens in ${row.seconds} s: ${row.tokensPerSec} tokens/s, ${row.tokensPerCpuS} per instance core` +
      (redisCpuS === null ? '' : `, Redis ${row.redisCorePct}% of a core`))
    return row
  } finally {
    await closeAll(processes)
  }
}

/** The throughput cases, one after another (never two competing for the CPUs); the logs of a count back to back, alternating which goes first. */
export async function runThroughput (stats: RedisStats, plan: ResumePlan, say: Log): Promise<ThroughputRow[]> {
  const rows: ThroughputRow[] = []
  for (const [i, answers] of plan.throughput.answers.entries()) {
    const logs = i % 2 === 0 ? plan.throughput.logs : [...plan.throughput.logs].reverse()
    for (const log of logs) rows.push(await throughputCase(stats, plan, log, answers, say))
  }
  const order = (r: ThroughputRow): number => plan.throughput.answers.indexOf(r.answers) * 10 + plan.throughput.logs.indexOf(r.log)
  return rows.sort((a, b) => order(a) - order(b))
}

/** Answers paced on A, a sample cut and resumed on B: latency to the first missed token, and the accounting across the cut. */
export async function runResume (stats: RedisStats, plan: ResumePlan, say: Log): Promise<ResumeRow> {
  const r = plan.resume
  await stats.flush()
  const key = `resume-bench-${process.pid}-${++keys}`
  const client = new IpcClient(spawnSibling(__filename, 'client'), 'client')
  const processes = [client]
  try {
    const a = await startInstance('instance A', key, stats.url)
    processes.push(a.instance)
    const b = await startInstance('instance B', key, stats.url)
    processes.push(b.instance)
    const reply = await client.request<ResumeReply>({
      type: 'resume',
      portA: a.port,
      portB: b.port,
      answers: r.answers,
      tokens: r.tokens,
      bytes: plan.tokenBytes,
      everyMs: r.everyMs,
      cuts: r.cuts,
      cutFromMs: r.cutFromMs,
      cutEveryMs: r.cutEveryMs,
      gapMs: r.gapMs,
      timeoutMs: plan.answerTimeoutMs
    }, r.tokens * r.everyMs + r.cutFromMs + r.cuts * r.cutEveryMs + plan.answerTimeoutMs + REQUEST_MS)
    const latency = new Histogram()
    latency.merge(reply.latencyUs)
    const ms = (us: number): number => round(us / 1000)
    const row: ResumeRow = {
      answers: r.answers,
      tokensPerAnswer: r.tokens,
      everyMs: r.everyMs,
      gapMs: r.gapMs,
      cuts: Math.min(r.cuts, r.answers),
      resumed: reply.resumed,
      skipped: reply.skipped,
      firstNotNext: reply.firstNotNext,
      p50Ms: latency.count === 0 ? 0 : ms(latency.quantile(0.5)),
      p99Ms: latency.count === 0 ? 0 : ms(latency.quantile(0.99)),
      maxMs: ms(latency.max),
      counts: reply.counts,
      cutCounts: reply.cutCounts,
      failures: reply.failures
    }
    say(`resume: ${row.resumed}/${row.cuts} cuts resumed on B, p50 ${row.p50Ms} ms, p99 ${row.p99Ms} ms; ${reply.counts.delivered} tokens over ${reply.counts.answers} answers`)
    return row
  } finally {
    await closeAll(processes)
  }
}

/** N answers run to their end on a flushed Redis: used_memory and keys before and after, per answer. */
export async function runMemory (stats: RedisStats, plan: ResumePlan, say: Log): Promise<MemoryRow> {
  const m = plan.memory
  await stats.flush()
  const key = `resume-bench-${process.pid}-${++keys}`
  const client = new IpcClient(spawnSibling(__filename, 'client'), 'client')
  const processes = [client]
  try {
    const { instance, port } = await startInstance('instance', key, stats.url)
    processes.push(instance)
    await sleep(300)
    const usedMemoryBefore = await stats.usedMemory()
    const keysBefore = await stats.dbsize()
    const slots = Math.min(m.concurrency, m.answers)
    const reply = await client.request<AnswersReply>({
      type: 'answers', port, answers: slots, perSlot: Math.ceil(m.answers / slots), tokens: m.tokens, bytes: plan.tokenBytes, maxMs: 10 * 60_000, timeoutMs: plan.answerTimeoutMs
    }, 10 * 60_000 + plan.answerTimeoutMs + REQUEST_MS)
    await sleep(300)
    const usedMemoryAfter = await stats.usedMemory()
    const keysAfter = await stats.dbsize()
    const answerKeys = await stats.scan(`{${key}:r:*`)
    const tags = [...new Set(answerKeys.map((k) => k.slice(0, k.indexOf('}') + 1)))].slice(0, 20)
    let sampledBytes = 0
    for (const k of answerKeys.filter((k) => tags.includes(k.slice(0, k.indexOf('}') + 1)))) sampledBytes += await stats.memoryUsage(k)
    const n = Math.max(1, reply.completed)
    const row: MemoryRow = {
      answers: reply.started,
      tokensPerAnswer: m.tokens,
      tokenBytes: plan.tokenBytes,
      completed: reply.completed,
      usedMemoryBefore,
      usedMemoryAfter,
      bytesPerAnswer: Math.round((usedMemoryAfter - usedMemoryBefore) / n),
      bytesPerToken: round((usedMemoryAfter - usedMemoryBefore) / n / m.tokens, 1),
      keysBefore,
      keysAfter,
      keysPerAnswer: round((keysAfter - keysBefore) / n, 2),
      answerKeysPerAnswer: round(answerKeys.length / n, 2),
      sampled: { answers: tags.length, bytesPerAnswer: tags.length === 0 ? 0 : Math.round(sampledBytes / tags.length) }
    }
    say(`memory: ${row.completed} answers of ${row.tokensPerAnswer} tokens: ${row.bytesPerAnswer} bytes per answer (${row.bytesPerToken} per token), ${row.keysPerAnswer} keys per answer`)
    return row
  } finally {
    await closeAll(processes)
  }
}

function packageVersion (root: string, name: string): string {
  try {
    return (JSON.parse(readFileSync(path.join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version
  } catch {
    return 'unknown'
  }
}

async function main (): Promise<void> {
  const run = startBenchRun(process.argv.slice(2), parseArgs, USAGE, __dirname)
  if (run === null) return
  const { args: { plan }, load, root } = run
  const started = Date.now()
  const redis = await startRedis()
  const stats = new RedisStats(redis.url)
  try {
    const has = (phase: ResumePlan['phases'][number]): boolean => plan.phases.includes(phase)
    const throughput = has('throughput') ? await runThroughput(stats, plan, logToStderr) : []
    const resume = has('resume') ? await runResume(stats, plan, logToStderr) : null
    const memory = has('memory') ? await runMemory(stats, plan, logToStderr) : null
    const compare = has('compare') ? await runCompare(redis.url, () => stats.flush(), plan, logToStderr) : []
    const results: ResumeResults = {
      finishedAt: new Date().toISOString(),
      durationS: Math.round((Date.now() - started) / 1000),
      redisVersion: await stats.version(),
      nodeVersion: process.versions.node,
      resumableStreamVersion: packageVersion(root, 'resumable-stream'),
      machine: endLoadRecord(load),
      machineNote: load.note,
      plan,
      throughput,
      resume,
      memory,
      compare,
      checks: resumeChecks({ throughput, resume, compare })
    }
    process.stdout.write(await writeResumeReport(load.dir, results) + '\n')
    logToStderr(`${plan.name} run done in ${results.durationS} s; wrote ${path.join(load.dir, 'resume.{json,md,svg}')}`)
  } finally {
    stats.close()
    await redis.kill()
  }
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`[resume] ${error instanceof Error ? error.message : String(error)}\n`)
    process.exitCode = 1
  })
}
