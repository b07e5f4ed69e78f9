/**
 * `npm run bench:chaos [-- --quick]`: the Redis bus under the faults of issues 19 and 31, one row each,
 * against real redis-server / sentinel and Tower processes on free loopback ports, all stopped at
 * the end (and on Ctrl-C). Results: benchmarks/results/chaos.{json,md,svg} (--quick: results/tmp/).
 */
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { repoRoot } from '../lib/repo-root'
import { killAllGroups } from '../lib/processes'
import { towerCli } from '../lib/tower/launcher'
import { faults } from './faults'
import { parseArgs, USAGE } from './plan'
import { withVerdicts, writeChaosReport, type ChaosResults } from './report'
import { runRow } from './row'

const log = (line: string): void => { process.stderr.write(`[chaos] ${line}\n`) }

function description (): string {
  const redis = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).split(' ').find((w) => w.startsWith('v=')) ?? '?'
  return `${os.type().toLowerCase()} ${os.release()}, ${os.cpus()[0]?.model ?? '?'}, Node ${process.version}, redis-server ${redis.slice(2)}; every process on the same host.`
}

async function main (): Promise<void> {
  const root = repoRoot(__dirname)
  const { plan, outDir, help } = parseArgs(process.argv.slice(2), path.join(root, 'benchmarks', 'results'))
  if (help) {
    process.stdout.write(USAGE)
    return
  }
  const cli = towerCli(root)
  if (!existsSync(cli)) throw new Error(`${cli} is missing: run npm run bench:build first`)
  const all = faults(plan.times)
  const unknown = plan.only.filter((name) => !all.some((f) => f.name === name))
  if (unknown.length > 0) throw new Error(`unknown fault(s) ${unknown.join(', ')}; known: ${all.map((f) => f.name).join(', ')}`)
  const chosen = plan.only.length === 0 ? all : all.filter((f) => plan.only.includes(f.name))
  const started = Date.now()
  const results: ChaosResults = {
    plan,
    finishedAt: '',
    durationS: 0,
    machine: { cpus: os.cpus().length, loadBefore: os.loadavg(), loadAfter: [], description: description() },
    rows: [],
    refused: [],
    failures: []
  }
  try {
    for (const fault of chosen) {
      log(`${fault.name}: ${fault.title}`)
      try {
        const row = withVerdicts(await runRow(fault, { ...plan.row, cli }, log))
        results.rows.push(row)
        log(`${fault.name}: acked ${row.acknowledged}, lost silently ${row.lostSilently}, late ${row.late}, resyncs max ${row.resyncs.max}, notify max ${row.notifyDuringFault.maxMs ?? '–'} ms, dropped ${row.streamsDropped}`)
      } catch (error) {
        const { message } = error as Error
        if (fault.refusedAtStart?.test(message) === true) {
          results.refused.push(`${fault.title}: ${message}`)
          log(`${fault.name}: refused at start, as it must be`)
          continue
        }
        results.failures.push(`${fault.name}: ${message}`)
        log(`${fault.name} failed: ${(error as Error).stack ?? String(error)}`)
        process.exitCode = 1
      }
    }
  } finally {
    killAllGroups()
  }
  results.machine.loadAfter = os.loadavg()
  results.finishedAt = new Date().toISOString()
  results.durationS = (Date.now() - started) / 1000
  process.stdout.write(await writeChaosReport(outDir, results))
  log(`${plan.name} run done in ${results.durationS.toFixed(0)} s; wrote ${path.join(outDir, 'chaos.{json,md,svg}')}`)
}

main().catch((error: Error) => {
  killAllGroups()
  process.stderr.write(`bench:chaos: ${error.stack ?? error.message}\n`)
  process.exit(1)
})
