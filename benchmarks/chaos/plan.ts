import path from 'node:path'
import type { FaultTimes } from './faults'
import type { RowPlan } from './row'

/** One bench:chaos run: every loop in it is bounded by these counts and times. */
export interface ChaosPlan {
  name: 'full' | 'quick'
  times: FaultTimes
  row: Omit<RowPlan, 'cli'>
  /** Only these faults (by name); empty: all. */
  only: string[]
}

export const FULL_PLAN: Readonly<ChaosPlan> = Object.freeze({
  name: 'full',
  times: { stallMs: 15_000, instanceStopMs: 5000, writeWindowMs: 1500, failoverTimeoutMs: 20_000, latencyMs: 10_000, partitionMs: 20_000 },
  row: { clientsPerInstance: 50, beforeMs: 2000, afterMs: 4000, drainMs: 2000, notifyTimeoutMs: 3000, maxInFlight: 1000, statsEveryMs: 250 },
  only: []
})

export const QUICK_PLAN: Readonly<ChaosPlan> = Object.freeze({
  name: 'quick',
  times: { stallMs: 4000, instanceStopMs: 5000, writeWindowMs: 1000, failoverTimeoutMs: 20_000, latencyMs: 4000, partitionMs: 8000 },
  row: { clientsPerInstance: 10, beforeMs: 1500, afterMs: 3000, drainMs: 1500, notifyTimeoutMs: 3000, maxInFlight: 1000, statsEveryMs: 250 },
  only: []
})

export const USAGE = `Usage: npm run bench:chaos [-- --quick] [-- --only name,name] [-- --out DIR]

Tower instances on a real redis-server (or a Sentinel set) while Redis stalls, fails over,
restarts from RDB or AOF, evicts, or an instance stops, and while one instance's connections to
Redis are slowed, half-open, killed by Redis or reset (a fault relay); one row per fault.
  --quick   short stalls, few clients; results in benchmarks/results/tmp/
  --only    run only these faults (names as in the table; --only=a,b too)
  --out     write chaos.{json,md,svg} there
`

const names = (list: string): string[] => list.split(',').filter((name) => name !== '')

export function parseArgs (argv: readonly string[], resultsDir: string): { plan: ChaosPlan, outDir: string, help: boolean } {
  let quick = false
  let outDir: string | undefined
  let only: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (arg === '--help' || arg === '-h') return { plan: FULL_PLAN, outDir: resultsDir, help: true }
    if (arg === '--quick') quick = true
    else if (arg === '--out' && argv[i + 1] !== undefined) outDir = argv[++i]
    else if (arg === '--only' && argv[i + 1] !== undefined) only = names(argv[++i])
    else if (arg.startsWith('--only=')) only = names(arg.slice('--only='.length))
    else throw new Error(`unknown argument ${JSON.stringify(arg)}\n${USAGE}`)
  }
  const base = quick ? QUICK_PLAN : FULL_PLAN
  const plan = { ...base, only }
  // A partial or quick run never overwrites the committed results.
  return { plan, outDir: outDir ?? (quick || only.length > 0 ? path.join(resultsDir, 'tmp') : resultsDir), help: false }
}
