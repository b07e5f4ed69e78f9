/**
 * `npm run bench:fanout [-- --quick]`: every contender × every stream count, each case in fresh
 * processes, one after another (never two cases competing for the CPU); results go to
 * benchmarks/results/fanout.{json,md,svg} (a --quick run's to benchmarks/results/tmp/). `-- --render`
 * redraws the table and chart from the JSON.
 */
import { mkdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { finishLoadRecord, startLoadRecord, takeForce } from '../lib/machine-load'
import { repoRoot } from '../lib/repo-root'
import { AB_MAX_STREAMS, measureMetricsAB } from './metrics-ab'
import { measureCase, type MeasuredCase } from './case'
import { areas, topFrames, type CpuProfile, type FrameTime } from './cpu-profile'
import { parseArgs, USAGE, type FanoutPlan } from './plan'
import { combineRounds } from '../lib/fanout/rounds'
import { backToBackRounds, fanoutResults, writeFanoutReport, type FanoutResults } from './report'

export type Log = (line: string) => void

const logToStderr: Log = (line) => process.stderr.write(`[fanout] ${line}\n`)

function frameLines (title: string, frames: FrameTime[]): string[] {
  return [title, ...frames.map((f) => `  ${f.selfPct.toFixed(1).padStart(5)}%  ${f.selfMs.toFixed(1).padStart(8)} ms  ${f.frame}`)]
}

/**
 * Runs the plan's rounds; in each, stream count by stream count, every contender at each (in
 * reverse order every other round, so a drift on the host does not favour one contender).
 */
/** Measured broadcasts per side of the metrics A/B per round of the plan, after a warm-up. */
const AB_PAIRS_PER_ROUND = 200
const AB_WARMUP_PAIRS = 20

export async function runFanout (plan: FanoutPlan, log: Log = logToStderr, profileDir?: string): Promise<FanoutResults> {
  const measured = new Map<string, MeasuredCase[]>()
  for (let round = 0; round < plan.rounds; round++) {
    if (plan.rounds > 1) log(`round ${round + 1} of ${plan.rounds}`)
    const contenders = round % 2 === 0 ? plan.contenders : [...plan.contenders].reverse()
    for (const clients of plan.clients) {
      for (const contender of contenders) {
        const profileFile = round === 0 ? profileFileFor(plan, contender, clients, profileDir) : null
        const result = await measureCase(plan, contender, clients, log, profileFile)
        const key = `${contender} ${clients}`
        measured.set(key, [...(measured.get(key) ?? []), result])
        if (profileFile !== null) logProfile(profileFile, log)
      }
    }
  }
  const rounds = plan.clients.flatMap((clients) => plan.contenders.map((contender) => measured.get(`${contender} ${clients}`) ?? []))
  const cases = rounds.map((caseRounds) => combineRounds(caseRounds.map((r) => r.steady)))
  const bursts = rounds.flatMap((caseRounds) => plan.burst.sizes.map((_, i) => combineRounds(caseRounds.map((r) => r.bursts[i]))))
  const results = fanoutResults(plan, cases, bursts)
  results.backToBackRounds = backToBackRounds(plan.clients.flatMap((clients) => plan.contenders.flatMap((contender) =>
    (measured.get(`${contender} ${clients}`) ?? []).map((m, i) => ({ round: i + 1, row: m.steady })))))
  if (plan.contenders.includes('tower-sse+metrics')) {
    results.metricsAB = []
    // Separate rows measure each contender in its own processes minutes apart; the ±5% target is judged on this.
    for (const clients of plan.clients.filter((n) => n <= AB_MAX_STREAMS)) {
      log(`metrics A/B: ${clients} streams each, interleaved`)
      results.metricsAB.push(await measureMetricsAB(clients, plan.rounds * AB_PAIRS_PER_ROUND, AB_WARMUP_PAIRS))
    }
  }
  return results
}

/** Profiled with --profile: tower-sse, and the raw loop to read its shares against. */
const PROFILED = ['tower-sse', 'raw']

/**
 * Where the profile of this case goes, or null unless profiling was asked for and this is a
 * profiled case: tower-sse or the raw loop at the largest stream count (its bursts of the largest size).
 */
function profileFileFor (plan: FanoutPlan, contender: string, clients: number, profileDir?: string): string | null {
  if (!plan.profile || !PROFILED.includes(contender) || clients !== Math.max(...plan.clients)) return null
  const dir = profileDir ?? path.join(repoRoot(__dirname), 'benchmarks', 'results', 'tmp')
  mkdirSync(dir, { recursive: true })
  return path.join(dir, `fanout-${contender}-${clients}.cpuprofile`)
}

function logProfile (profileFile: string, log: Log): void {
  const profile = JSON.parse(readFileSync(profileFile, 'utf8')) as CpuProfile
  log(`CPU profile of the largest bursts: ${profileFile}`)
  for (const line of [...frameLines('self time by area:', areas(profile)), ...frameLines('top frames by self time:', topFrames(profile))]) log(line)
}

async function main (): Promise<void> {
  const { force, argv } = takeForce(process.argv.slice(2))
  const { plan, outDir, render, help } = parseArgs(argv)
  if (help) {
    process.stdout.write(USAGE)
    return
  }
  // A quick run is a smoke test: it must not replace the full run's committed results.
  const results = path.join(repoRoot(__dirname), 'benchmarks', 'results')
  const dir = outDir ?? (plan.name === 'quick' ? path.join(results, 'tmp') : results)
  if (render) {
    const saved = JSON.parse(readFileSync(path.join(dir, 'fanout.json'), 'utf8')) as FanoutResults
    process.stdout.write(await writeFanoutReport(dir, saved))
    return
  }
  const started = Date.now()
  const load = startLoadRecord(dir, results, force)
  process.stdout.write(await writeFanoutReport(load.dir, await runFanout(plan)))
  finishLoadRecord(load, 'fanout')
  logToStderr(`${plan.name} run done in ${((Date.now() - started) / 1000).toFixed(0)} s; wrote ${path.join(load.dir, 'fanout.{json,md,svg}')}`)
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`[fanout] ${error instanceof Error ? error.message : String(error)}\n`)
    process.exitCode = 1
  })
}
