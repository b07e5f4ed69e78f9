/**
 * `npm run bench:soak [-- --quick] [-- --workers=2]`: Tower as `npm start` runs it, under the
 * seed's traffic compressed (see plan.ts), sampled from its own /metrics every 10 s; with
 * --workers=2 on a redis-server of its own, restarted inside the run, and a worker killed. Tower
 * (and its redis-server) is pinned to one CPU with taskset, every load generator and this runner
 * to another, so what Tower reports is its own (unpinned, and said so, without taskset or a second
 * CPU). Every process it starts is killed at the end, on error and on Ctrl-C. Results:
 * benchmarks/results/soak.{json,md,svg} (a quick or shortened run's in benchmarks/results/tmp/).
 */
import path from 'node:path'
import { pinSelf, planPinning } from '../lib/cpu-affinity'
import { killAllGroups } from '../lib/processes'
import { startRedis } from '../lib/redis-server'
import { towerBench, TowerProcess } from '../lib/tower/launcher'
import { endLoadRecord } from '../lib/machine-load'
import { parseArgs, towerFlags, USAGE } from './plan'
import { soakRun, writeSoakReport } from './report'
import { runSoakTraffic } from './soak'

const log = (line: string): void => { process.stderr.write(`[soak] ${new Date().toISOString().slice(11, 19)} ${line}\n`) }

async function main (): Promise<void> {
  const bench = towerBench(process.argv.slice(2), parseArgs, USAGE, __dirname)
  if (bench === null) return
  const { plan, cli, load } = bench
  if (load.note !== null) log(load.note)
  const dir = load.dir
  const pinning = planPinning()
  if (pinning.pinned) {
    // The runner samples and coordinates: it sits with the load, off the server's CPU.
    pinSelf(pinning.loadCpu)
    log(`pinned: Tower${plan.workers > 1 ? ', its workers and its redis-server' : ''} on CPU ${pinning.serverCpu} (taskset -c ${pinning.serverCpu}); clients, storm waves, poster and this runner on CPU ${pinning.loadCpu}`)
  } else {
    log(`NOT pinned (${pinning.reason}): Tower and the load share the CPUs`)
  }
  const redis = plan.workers > 1 ? await startRedis({ launcher: pinning.serverLauncher }) : null
  const towerStart = Date.now()
  const tower = await TowerProcess.start({ cli, workers: plan.workers, redisUrl: redis?.url, flags: towerFlags(plan), launcher: pinning.serverLauncher })
  log(`Tower (${plan.workers} worker(s), ${redis === null ? 'memory bus' : `Redis on ${redis.port}`}) on port ${tower.port}; ${plan.durationMs / 60_000} min`)
  try {
    const traffic = await runSoakTraffic(plan, tower, redis, log, pinning)
    await tower.shutdown(10_000)
    const run = soakRun(plan, traffic, { lines: tower.logLines, text: tower.log, lifeS: (Date.now() - towerStart) / 1000 }, endLoadRecord(load), load.note)
    process.stdout.write(await writeSoakReport(dir, run) + '\n')
    log(`wrote ${path.join(dir, 'soak.{json,md,svg}')}`)
  } finally {
    tower.stop()
    await redis?.kill()
    killAllGroups()
  }
}

main().catch((error: Error) => {
  killAllGroups()
  process.stderr.write(`bench:soak: ${error.stack ?? error.message}\n`)
  process.exit(1)
})
