import { mkdir, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { connectsChart } from './chart'
import { changedFiles, codeFingerprint } from './code-fingerprint'
import { narrowedRunProblem, runNarrowed } from './namespace'
import type { StormPlan } from './plan'
import type { PopulationName } from '../lib/populations/names'
import { runRejection, type RejectionResult } from './rejection'
import { runRestart, type RestartResult } from './restart'
import { Progress, type ProgressOut } from './progress'
import { stormMarkdown, type StormReport, type StormRow } from './report'
import { runScenario, type ScenarioSpec } from './scenario'
import { capacityOf, type ServerVariant } from './servers'
import { checkTargets } from './targets'

// Populations outlive the measured window a little while they are stopped; autocannon must not end first.
const SETTLE_SECONDS = 60

/** Populations that follow the server's `retry:`, whose return after a restart it can spread. */
const RESTART_POPULATIONS: readonly PopulationName[] = ['browser', 'client']

/** The files one run writes into the plan's output folder. */
export const OUTPUT_FILES = ['storm.json', 'storm.md', 'storm.svg'] as const

/**
 * Runs every server × population of the plan (each, where it can, again with ~1,000 ports), then
 * the refusal path; writes storm.json, storm.md and storm.svg and returns the report and storm.md.
 */
export async function runStorm (
  plan: StormPlan, command: string, progressOut: ProgressOut = process.stderr
): Promise<{ report: StormReport, markdown: string }> {
  const codeAtStart = codeFingerprint()
  const matrix = plan.servers.filter((v) => v.rejectionOnly !== true)
  const refusing = plan.servers.filter((v) => v.setup !== 'legacy')
  const narrowedSkippedBecause = plan.narrowedSeconds === 0 ? 'not requested (--narrowed 0)' : narrowedRunProblem()
  const runsPerCell = narrowedSkippedBecause === null ? 2 : 1
  const rejectionSteps = plan.rejectionSeconds > 0 ? 2 * refusing.length : 0
  const restarts = plan.restartSeconds > 0
    ? matrix.flatMap((server) => plan.populations.filter((p) => RESTART_POPULATIONS.includes(p)).map((population) => ({ server, population })))
    : []
  const progress = new Progress(matrix.length * plan.populations.length * runsPerCell + rejectionSteps + restarts.length, progressOut)
  for (const { server, reason } of plan.skipped) progress.note(`skipping server ${server}: ${reason}`)
  if (narrowedSkippedBecause !== null) progress.note(`skipping the narrowed-port runs: ${narrowedSkippedBecause}`)

  const failures: StormReport['failures'] = []
  const rows: StormRow[] = []
  for (const server of matrix) {
    for (const population of plan.populations) {
      const row = await runCell(plan, server, population, narrowedSkippedBecause === null, progress)
      if ('error' in row) failures.push(row)
      else rows.push(row)
    }
  }
  let rejection: RejectionResult[] = []
  if (rejectionSteps > 0) {
    try {
      rejection = await runRejection({
        variants: refusing,
        seconds: plan.rejectionSeconds,
        warmupSeconds: plan.rejectionWarmupSeconds,
        connections: plan.rejectionConnections,
        settings: settings(plan, plan.rejectionSeconds)
      }, (name) => progress.next(`refusal path: ${name}`))
    } catch (error) {
      failures.push({ what: 'refusal path', error: (error as Error).message })
    }
  }
  const restart: RestartResult[] = []
  for (const { server, population } of restarts) {
    progress.next(`restart: ${server.name} × ${population}, ${capacityOf(server)} clients`)
    try {
      restart.push(await runRestart({
        server, population, clients: capacityOf(server), seconds: plan.restartSeconds, settings: settings(plan, plan.restartSeconds + 30)
      }))
    } catch (error) {
      failures.push({ what: `restart ${server.name} × ${population}`, error: (error as Error).message })
    }
  }
  progress.finish()
  const changed = changedFiles(codeAtStart, codeFingerprint())
  const warnings = changed.length === 0
    ? []
    : [`${changed.length} module file(s) changed while the benchmark ran (${changed.slice(0, 3).join(', ')}${changed.length > 3 ? ', …' : ''}): ` +
        'processes started after that ran different code; rerun when nothing else builds or edits']

  const { servers, skipped, outDir, ...settingsOfRun } = plan
  const report: StormReport = {
    generatedAt: new Date().toISOString(),
    command,
    environment: { node: process.version, cpus: os.cpus().length, platform: `${os.platform()} ${os.release()}` },
    settings: settingsOfRun,
    servers: servers.map((v) => ({ name: v.name, summary: v.summary, options: v.options, capacity: capacityOf(v) })),
    skipped,
    narrowedSkippedBecause,
    rows,
    rejection,
    restart,
    targets: checkTargets(rows, rejection, restart),
    failures,
    warnings
  }
  const markdown = stormMarkdown(report)
  await mkdir(outDir, { recursive: true })
  await writeFile(path.join(outDir, 'storm.json'), JSON.stringify(report, null, 2) + '\n')
  await writeFile(path.join(outDir, 'storm.md'), markdown)
  await writeFile(path.join(outDir, 'storm.svg'), await connectsChart(rows))
  return { report, markdown }
}

function settings (plan: StormPlan, seconds: number): ScenarioSpec['settings'] {
  return { hammerDelayMs: plan.hammerDelayMs, stormRate: plan.stormRate, maxSeconds: seconds + SETTLE_SECONDS }
}

/** One server × population: the main run, then (where it can) the same clients with ~1,000 ports. */
async function runCell (
  plan: StormPlan, server: ServerVariant, population: PopulationName, narrowed: boolean, progress: Progress
): Promise<StormRow | { what: string, error: string }> {
  const label = `${server.name} × ${population}`
  const spec: ScenarioSpec = {
    server,
    population,
    clients: plan.clients ?? Math.max(1, Math.round(plan.clientsPerCap * capacityOf(server))),
    warmupSeconds: plan.warmupSeconds,
    durationSeconds: plan.durationSeconds,
    settings: settings(plan, plan.warmupSeconds + plan.durationSeconds)
  }
  const total = spec.warmupSeconds + spec.durationSeconds
  try {
    progress.next(`${label}, ${spec.clients} clients`)
    const main = await runScenario(spec, (second) => progress.detail(`${second}/${total} s`))
    if (!narrowed) return { ...main, eaddrnotavail: null, narrowedConnectsPerMin: null, narrowedError: null }
    progress.next(`${label}, ~1,000 ports (${plan.narrowedSeconds} s)`)
    try {
      const short = await runNarrowed({ ...spec, warmupSeconds: 0, durationSeconds: plan.narrowedSeconds, settings: settings(plan, plan.narrowedSeconds) })
      return { ...main, eaddrnotavail: short.clientErrors.EADDRNOTAVAIL ?? 0, narrowedConnectsPerMin: short.connectsPerMin, narrowedError: null }
    } catch (error) {
      // The main run stands on its own; the row says why its narrowed figure is missing.
      progress.note(`narrowed run of ${label} failed: ${(error as Error).message}`)
      return { ...main, eaddrnotavail: null, narrowedConnectsPerMin: null, narrowedError: (error as Error).message }
    }
  } catch (error) {
    progress.note(`FAILED ${label}: ${(error as Error).message}`)
    return { what: label, error: (error as Error).message }
  }
}
