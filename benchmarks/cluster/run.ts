/**
 * `npm run bench:cluster [-- --quick]`: Tower on one process vs on node:cluster with the Redis
 * bus (fan-out), then a cluster under worker kills (chaos) and a Redis restart; its own
 * redis-server and Tower processes on free loopback ports, all killed at the end. Results:
 * benchmarks/results/cluster.{json,md,svg} (a --quick run's in benchmarks/results/tmp/).
 */
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { finishLoadRecord, startLoadRecord, takeForce, writeLoadRecord } from '../lib/machine-load'
import { runChaos } from './chaos'
import { combineRounds, measureFanout, type FanoutRow } from '../lib/tower/fanout-phase'
import { defaultOutDir, fanoutCases, parseArgs, USAGE, type ClusterPlan } from './plan'
import { Population } from '../lib/clients/population'
import { killAllGroups } from '../lib/processes'
import { startRedis } from '../lib/redis-server'
import { writeClusterReport, type ClusterResults } from './report'
import { runRestart } from './restart'
import { streamsPerInstance } from '../lib/tower/stats'
import { builtTowerCli, TowerProcess } from '../lib/tower/launcher'

const log = (line: string): void => { process.stderr.write(`[cluster] ${line}\n`) }

function host (): string {
  const redis = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).trim().split(' ').find((w) => w.startsWith('v=')) ?? '?'
  return `${os.type().toLowerCase()} ${os.release()}, ${os.cpus()[0]?.model ?? '?'} × ${os.cpus().length}, Node ${process.version}, redis-server ${redis.slice(2)}; every process (Redis, Tower, clients) on the same host.`
}

async function runPhases (plan: ClusterPlan, cli: string, results: ClusterResults): Promise<void> {
  const redis = await startRedis()
  log(`redis-server on port ${redis.port}`)
  for (const streams of plan.phases.includes('fanout') ? plan.fanout.streams : []) {
    const cases = fanoutCases(plan.workers, os.cpus().length)
    const measured = cases.map((): FanoutRow[] => [])
    for (let round = 0; round < plan.fanout.rounds; round++) {
      // Alternate which setup goes first, so a drift on the shared host favours neither.
      const order = cases.map((_, i) => i)
      if (round % 2 === 1) order.reverse()
      for (const i of order) {
        const { setup, instances } = cases[i]
        try {
          measured[i].push(await measureFanout(plan, cli, setup, instances, streams, redis.url, log))
        } catch (error) {
          results.failures.push(`fan-out ${setup} ×${instances} ${streams} round ${round + 1}: ${(error as Error).message}`)
          log(`fan-out ${setup} ×${instances} ${streams} failed: ${(error as Error).message}`)
        }
      }
    }
    for (const rows of measured) if (rows.length > 0) results.fanout.push(combineRounds(rows))
  }
  if (!plan.phases.includes('chaos') && !plan.phases.includes('restart')) {
    await redis.kill()
    return
  }
  const { chaos } = plan
  const total = chaos.clients + chaos.eventSourceClients
  const tower = await TowerProcess.start({ cli, workers: plan.workers, redisUrl: redis.url, flags: ['--max-clients', String(total)] })
  const population = Population.spawn(chaos.clients, chaos.clientsPerProcess, chaos.eventSourceClients)
  try {
    log(`chaos: opening ${chaos.clients} tower-sse/client and ${chaos.eventSourceClients} EventSource clients`)
    const opened = await population.open(`http://127.0.0.1:${tower.port}/api/events`, chaos.connectTimeoutMs)
    log(`chaos: open ${opened.client.open}/${opened.client.count} + ${opened.eventsource.open}/${opened.eventsource.count}; per instance ${(await streamsPerInstance(tower.port, tower.workerPids, opened.client.open + opened.eventsource.open, 5000)).join('/')}`)
    let nextSeq = 1
    if (plan.phases.includes('chaos')) {
      const chaosRun = await runChaos(plan, tower, population, redis, { client: opened.client.count, eventsource: opened.eventsource.count }, nextSeq, log)
      results.chaos = chaosRun.result
      nextSeq = chaosRun.nextSeq
      await waitForWorkers(tower, plan.workers)
    }
    if (plan.phases.includes('restart')) results.restart = (await runRestart(plan, tower, population, redis, nextSeq, log)).result
  } finally {
    await population.exit()
    tower.stop()
    await redis.kill()
  }
}

async function waitForWorkers (tower: TowerProcess, workers: number): Promise<void> {
  const deadline = Date.now() + 10_000
  while (!tower.ready(workers) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100))
}

async function main (): Promise<void> {
  const { force, argv } = takeForce(process.argv.slice(2))
  const { plan, outDir, help, targeted, render } = parseArgs(argv)
  if (help) {
    process.stdout.write(USAGE)
    return
  }
  const { root, cli } = builtTowerCli(__dirname)
  const dir = outDir ?? defaultOutDir(path.join(root, 'benchmarks', 'results'), plan, targeted)
  if (render) {
    const saved = JSON.parse(readFileSync(path.join(dir, 'cluster.json'), 'utf8')) as ClusterResults
    process.stdout.write(await writeClusterReport(dir, saved) + '\n')
    // writeClusterReport rewrote the JSON without the load the run recorded: put it back in both.
    if (saved.machine !== undefined) writeLoadRecord({ machine: saved.machine, busy: false, dir, note: null }, 'cluster')
    return
  }
  const started = Date.now()
  const load = startLoadRecord(dir, path.join(root, 'benchmarks', 'results'), force)
  const results: ClusterResults = { plan, finishedAt: '', durationS: 0, host: host(), fanout: [], chaos: null, restart: null, failures: [] }
  try {
    await runPhases(plan, cli, results)
  } catch (error) {
    results.failures.push(`run stopped: ${(error as Error).stack ?? String(error)}`)
    log(`run stopped: ${(error as Error).message}`)
    process.exitCode = 1
  } finally {
    killAllGroups()
  }
  results.finishedAt = new Date().toISOString()
  results.durationS = (Date.now() - started) / 1000
  process.stdout.write(await writeClusterReport(load.dir, results) + '\n')
  finishLoadRecord(load, 'cluster')
  log(`${plan.name}${targeted ? ' (targeted)' : ''} run done in ${results.durationS.toFixed(0)} s; wrote ${path.join(load.dir, 'cluster.{json,md,svg}')}`)
}

main().catch((error: Error) => {
  killAllGroups()
  process.stderr.write(`bench:cluster: ${error.stack ?? error.message}\n`)
  process.exit(1)
})
