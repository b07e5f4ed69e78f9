/**
 * `npm run bench:scale [-- --quick]`: one process per contender (the raw node:http loop, then
 * tower-sse) from 1,000 streams up to this machine's open-file ceiling, then Tower with 2 workers
 * on a redis-server of its own holding twice the ceiling. Every process it starts is killed at the
 * end, on error and on Ctrl-C; traffic stays on loopback. Results:
 * benchmarks/results/scale.{json,md,svg} (a quick or targeted run's in benchmarks/results/tmp/).
 */
import { execFileSync } from 'node:child_process'
import path from 'node:path'
import { NOTIFY_TIMEOUT_MS } from '../lib/clients/notify'
import { FANOUT_PHASE, measureFanout, type FanoutRow } from '../lib/tower/fanout-phase'
import { killAllGroups } from '../lib/processes'
import { startRedis } from '../lib/redis-server'
import { towerBench } from '../lib/tower/launcher'
import { BASELINE } from '../lib/fanout/contenders'
import { endLoadRecord } from '../lib/machine-load'
import { scaleTargets } from './capacity'
import { climbLadder, type ScaleRow } from './ladder'
import { ceilingStreams, parseArgs, resolveSteps, USAGE, type ScalePlan } from './plan'
import { capacityOf, writeScaleReport, type FileCeiling, type ScaleResults } from './report'

const log = (line: string): void => { process.stderr.write(`[scale] ${new Date().toISOString().slice(11, 19)} ${line}\n`) }

/** The hard open-file limit as a shell here reports it: what every process this bench starts may raise its own limit to. */
function fileCeiling (): FileCeiling {
  const text = execFileSync('/bin/sh', ['-c', 'ulimit -Hn'], { encoding: 'utf8' }).trim()
  const hardLimit = text === 'unlimited' ? Number.MAX_SAFE_INTEGER : Number(text)
  const streams = ceilingStreams(hardLimit)
  return { hardLimit, streams, source: `\`ulimit -Hn\` = ${text} (the hard RLIMIT_NOFILE this shell and every process it starts inherit; an unprivileged process cannot raise it), minus 64 files a process needs besides its sockets, rounded down: ${streams.toLocaleString('en-US')} streams per process` }
}

/** Tower on node:cluster with the Redis bus, `workers` × `perWorker` streams, through the fan-out phase bench:cluster also runs (lib/tower/fanout-phase). */
async function clusterPhase (plan: ScalePlan, cli: string, perWorker: number): Promise<FanoutRow | null> {
  if (plan.cluster === null) return null
  const { workers, events } = plan.cluster
  const redis = await startRedis()
  try {
    const clusterPlan = { fanout: { ...FANOUT_PHASE, events, warmupEvents: 2, deliveryTimeoutMs: plan.fanout.deliveryTimeoutMs }, notifyTimeoutMs: NOTIFY_TIMEOUT_MS }
    return await measureFanout(clusterPlan, cli, 'redis', workers, workers * perWorker, redis.url, log)
  } finally {
    await redis.kill()
  }
}

async function main (): Promise<void> {
  const bench = towerBench(process.argv.slice(2), parseArgs, USAGE, __dirname)
  if (bench === null) return
  const { plan, cli, load } = bench
  if (load.note !== null) log(load.note)
  const dir = load.dir
  const started = Date.now()
  const ceiling = fileCeiling()
  const steps = resolveSteps(plan, ceiling.streams)
  log(`${ceiling.source}; steps ${steps.join(', ')}`)
  const rows: ScaleRow[] = []
  const failures: string[] = []
  let cluster: FanoutRow | null = null
  try {
    for (const contender of plan.contenders) {
      try {
        rows.push(...await climbLadder(plan, contender, steps, log))
      } catch (error) {
        failures.push(`${contender}: ${(error as Error).message}`)
        log(`${contender} failed: ${(error as Error).message}`)
      }
    }
    const perWorker = plan.cluster?.perWorker === 'ceiling' ? ceiling.streams : plan.cluster?.perWorker ?? 0
    try {
      cluster = await clusterPhase(plan, cli, perWorker)
    } catch (error) {
      failures.push(`cluster: ${(error as Error).message}`)
      log(`cluster failed: ${(error as Error).message}`)
    }
  } finally {
    killAllGroups()
  }
  const contender = plan.contenders.find((name) => name !== BASELINE) ?? BASELINE
  const results: ScaleResults = {
    finishedAt: new Date().toISOString(),
    durationS: (Date.now() - started) / 1000,
    machine: endLoadRecord(load),
    machineNote: load.note,
    ceiling,
    plan,
    rows,
    cluster,
    capacity: capacityOf(rows, contender, BASELINE),
    targets: scaleTargets(rows, contender, BASELINE, cluster),
    failures
  }
  process.stdout.write(await writeScaleReport(dir, results) + '\n')
  log(`wrote ${path.join(dir, 'scale.{json,md,svg}')}`)
  if (failures.length > 0) process.exitCode = 1
}

main().catch((error: Error) => {
  killAllGroups()
  process.stderr.write(`bench:scale: ${error.stack ?? error.message}\n`)
  process.exit(1)
})
