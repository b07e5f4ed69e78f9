import type { ContenderName } from '../lib/fanout/contenders'
import { SPARE_FILES, type RigPlan } from '../lib/fanout/rig'

/** Everything one `bench:scale` run does; every loop of the run is bounded by these counts and times. */
export interface ScalePlan {
  name: 'full' | 'quick'
  /** The raw node:http loop and tower-sse (with its metrics on, so stats() and /metrics are timed), in this order. */
  contenders: ContenderName[]
  /** Stream counts one server process grows through; 'ceiling' is what this machine's file limit allows. */
  steps: Array<number | 'ceiling'>
  /** The heartbeat both contenders run while idle (tower-sse's default is 30 s; shorter, so the idle window holds several sweeps). */
  heartbeatMs: number
  /** Idle window per step: event-loop delay and CPU with only the heartbeat running. */
  idleMs: number
  /** Quiet time after a step's last connect, before memory is read. */
  settleMs: number
  /** Timed stats() calls and GET /metrics scrapes per step. */
  statsCalls: number
  scrapes: number
  /** Broadcasts per step, `periodMs` apart, each timed in the server, delivery timed at the clients. */
  broadcasts: number
  periodMs: number
  /** Deliveries sent back to back before a step's timed broadcasts (JIT, first-touch allocations). */
  warmupDeliveries: number
  /** The cluster phase: `workers` Tower workers on Redis holding `perWorker` × workers streams ('ceiling': the file limit's). */
  cluster: { workers: number, perWorker: number | 'ceiling', events: number } | null
  /** What the fan-out rig (admission, phases) needs, and the longest a warm-up sends for. */
  fanout: RigPlan & { fast: { maxMs: number } }
}

export const FULL_PLAN: Readonly<ScalePlan> = Object.freeze({
  name: 'full',
  contenders: ['raw', 'tower-sse+metrics'] as ContenderName[],
  steps: [1000, 5000, 10_000, 15_000, 'ceiling'] as Array<number | 'ceiling'>,
  heartbeatMs: 1000,
  idleMs: 10_000,
  settleMs: 1000,
  statsCalls: 50,
  scrapes: 20,
  broadcasts: 20,
  periodMs: 500,
  warmupDeliveries: 100_000,
  cluster: { workers: 2, perWorker: 'ceiling' as const, events: 20 },
  fanout: { streamsPerProcess: 2500, connectConcurrency: 64, deliveryTimeoutMs: 60_000, fast: { maxMs: 4000 } }
})

/** Small steps, the same phases: a smoke run. */
export const QUICK_PLAN: Readonly<ScalePlan> = Object.freeze({
  ...FULL_PLAN,
  name: 'quick',
  steps: [1000, 3000],
  idleMs: 3000,
  settleMs: 300,
  statsCalls: 20,
  scrapes: 5,
  broadcasts: 8,
  periodMs: 250,
  warmupDeliveries: 20_000,
  cluster: { workers: 2, perWorker: 3000, events: 8 }
})

/**
 * Streams one process can hold under a hard limit of `hardLimit` open files: minus the files a
 * process needs besides its sockets, rounded down to a thousand.
 */
export function ceilingStreams (hardLimit: number): number {
  if (!Number.isSafeInteger(hardLimit) || hardLimit <= SPARE_FILES) throw new RangeError(`the open-file limit must be an integer above ${SPARE_FILES}, got ${hardLimit}`)
  return Math.floor((hardLimit - SPARE_FILES) / 1000) * 1000
}

/** The plan's steps as stream counts, ascending, none above the ceiling. */
export function resolveSteps (plan: ScalePlan, ceiling: number): number[] {
  const steps = plan.steps.map((step) => step === 'ceiling' ? ceiling : step)
  const over = steps.filter((n) => n > ceiling)
  if (over.length > 0) throw new Error(`bench:scale: ${over.join(', ')} streams do not fit under this machine's ceiling of ${ceiling}`)
  return [...new Set(steps)].sort((a, b) => a - b)
}

export interface ParsedArgs {
  plan: ScalePlan
  outDir: string | null
  help: boolean
  /** Steps or phases other than the plan's: not the run. */
  targeted: boolean
}

export const USAGE = `npm run bench:scale [-- --quick] [-- --steps=1000,5000,ceiling] [-- --no-cluster] [-- --out=DIR]
  --quick        small steps (1,000 and 3,000; the cluster phase at 2 × 3,000), written to benchmarks/results/tmp/
  --steps=LIST   stream counts (integers or "ceiling"); a targeted run, written to results/tmp/ unless --out
  --no-cluster   skip the --workers 2 on Redis phase (a targeted run)
  --out=DIR      write scale.{json,md,svg} to DIR instead
  --force        write over the committed results even if the machine was busy when the run started
`

export function parseArgs (argv: string[]): ParsedArgs {
  let plan = structuredClone(FULL_PLAN) as ScalePlan
  let outDir: string | null = null
  let help = false
  let steps: ScalePlan['steps'] | null = null
  let noCluster = false
  for (const arg of argv) {
    if (arg === '--quick') plan = structuredClone(QUICK_PLAN) as ScalePlan
    else if (arg === '--help' || arg === '-h') help = true
    else if (arg === '--no-cluster') noCluster = true
    else if (arg.startsWith('--out=') && arg.length > '--out='.length) outDir = arg.slice('--out='.length)
    else if (arg.startsWith('--steps=')) {
      steps = arg.slice('--steps='.length).split(',').map((text) => {
        if (text === 'ceiling') return 'ceiling'
        const n = Number(text)
        if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1) throw new Error(`bench:scale: --steps takes positive integers or "ceiling", got ${JSON.stringify(text)}`)
        return n
      })
    } else throw new Error(`bench:scale: unknown argument ${JSON.stringify(arg)}\n${USAGE}`)
  }
  if (steps !== null) plan.steps = steps
  if (noCluster) plan.cluster = null
  return { plan, outDir, help, targeted: steps !== null || noCluster }
}
