import { CONTENDER_NAMES, isContenderName, type ContenderName } from '../lib/fanout/contenders'
import { BURST_SOURCES, type BurstSource, type RigPlan } from '../lib/fanout/rig'

/** Everything one run does; every load loop below is bounded by these counts and times. */
export interface FanoutPlan extends RigPlan {
  name: 'full' | 'quick'
  contenders: ContenderName[]
  /** Times every case is measured; each figure reported is its median over the rounds. */
  rounds: number
  /** Stream counts to measure, each against every contender. */
  clients: number[]
  /** Quiet time after the last connect, before the idle-memory reading. */
  settleMs: number
  /** Deliveries (events × streams) sent back to back before measuring, so JIT-compiled code is measured. */
  warmupDeliveries: number
  /**
   * The steady phase sends `events` at one rate chosen so that every stream count gets the same
   * write load (deliveries/s), well below what the raw loop sustains: latency without queueing.
   */
  steady: { deliveriesPerSec: number, events: number }
  /** Back-to-back broadcasts: stops at `maxEvents` or after `maxMs` of sending. */
  fast: { maxEvents: number, maxMs: number }
  /**
   * Bursts of each size, back to back (the next burst in the turn after the last one's writes):
   * whole bursts until `maxEvents` or `maxMs` of sending, at least one. `from: 'callbacks'`: each
   * event of a burst broadcast from its own callback in one loop phase, as notify requests parsed
   * in one poll phase are; `'loop'`: all from one synchronous loop.
   */
  burst: { sizes: number[], maxEvents: number, maxMs: number, from: BurstSource }
  /** Capture a CPU profile of tower-sse's fast phase at the largest stream count. */
  profile: boolean
}

export const FULL_PLAN: Readonly<FanoutPlan> = Object.freeze({
  name: 'full',
  contenders: CONTENDER_NAMES,
  rounds: 3,
  clients: [1000, 10_000],
  streamsPerProcess: 2500,
  connectConcurrency: 64,
  settleMs: 1000,
  warmupDeliveries: 100_000,
  steady: { deliveriesPerSec: 20_000, events: 30 },
  fast: { maxEvents: 500, maxMs: 4000 },
  burst: { sizes: [1, 10, 50], maxEvents: 500, maxMs: 4000, from: 'callbacks' as const },
  deliveryTimeoutMs: 30_000,
  profile: false
})

export const QUICK_PLAN: Readonly<FanoutPlan> = Object.freeze({
  ...FULL_PLAN,
  name: 'quick',
  rounds: 1,
  clients: [200, 1000],
  settleMs: 300,
  warmupDeliveries: 20_000,
  steady: { deliveriesPerSec: 20_000, events: 20 },
  fast: { maxEvents: 100, maxMs: 1500 },
  burst: { sizes: [1, 10, 50], maxEvents: 100, maxMs: 1500, from: 'callbacks' as const },
  deliveryTimeoutMs: 10_000
})

/** Events per second of the steady phase with `clients` streams. */
export function steadyRate (plan: FanoutPlan, clients: number): number {
  return plan.steady.deliveriesPerSec / clients
}

export interface RunArgs {
  plan: FanoutPlan
  /** Where fanout.json/.md/.svg go; by default the repository's benchmarks/results (its tmp/ for --quick). */
  outDir: string | null
  /** Measure nothing: redraw fanout.md and fanout.svg from the fanout.json already there. */
  render: boolean
  /** Print the usage and run nothing. */
  help: boolean
}

export const USAGE = 'usage: run [--help] [--quick] [--profile] [--rounds=3] [--clients=1000,10000] [--contenders=raw,tower-sse,…] [--bursts=1,10,50] [--burst-from=callbacks|loop] [--out=DIR] [--force] | run --render [--out=DIR]'

function positiveIntegers (flag: string, text: string): number[] {
  const values = text.split(',').map((part) => Number(part))
  if (values.some((n) => !Number.isSafeInteger(n) || n < 1)) {
    throw new Error(`${flag} must be a comma-separated list of positive integers, got "${text}"\n${USAGE}`)
  }
  return values
}

function contenderList (text: string): ContenderName[] {
  const names = text.split(',')
  for (const name of names) {
    if (!isContenderName(name)) {
      throw new Error(`--contenders: unknown contender "${name}"; known: ${CONTENDER_NAMES.join(', ')}\n${USAGE}`)
    }
  }
  return names as ContenderName[]
}

/** Reads the command line; an unknown or malformed flag is an error that names it. */
export function parseArgs (argv: string[]): RunArgs {
  const base = argv.includes('--quick') ? QUICK_PLAN : FULL_PLAN
  const plan: FanoutPlan = { ...base, contenders: [...base.contenders], clients: [...base.clients], burst: { ...base.burst, sizes: [...base.burst.sizes] } }
  let outDir: string | null = null
  let render = false
  let help = false
  for (const arg of argv) {
    const [flag, value] = arg.split(/=(.*)/s, 2)
    if (arg === '--quick') continue
    else if (arg === '--help' || arg === '-h') help = true
    else if (arg === '--render') render = true
    else if (flag === '--profile' && value === undefined) plan.profile = true
    else if (flag === '--clients' && value !== undefined) plan.clients = positiveIntegers(flag, value)
    else if (flag === '--rounds' && value !== undefined && /^\d+$/.test(value) && Number(value) >= 1) plan.rounds = Number(value)
    else if (flag === '--contenders' && value !== undefined) plan.contenders = contenderList(value)
    else if (flag === '--bursts' && value !== undefined) plan.burst.sizes = positiveIntegers(flag, value)
    else if (flag === '--burst-from' && value !== undefined && (BURST_SOURCES as readonly string[]).includes(value)) plan.burst.from = value as BurstSource
    else if (flag === '--out' && value !== undefined && value !== '') outDir = value
    else throw new Error(`unknown or malformed argument "${arg}"\n${USAGE}`)
  }
  return { plan, outDir, render, help }
}
