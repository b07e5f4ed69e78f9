import { NOTIFY_TIMEOUT_MS } from '../lib/clients/notify'
import { FANOUT_PHASE, type FanoutPhasePlan } from '../lib/tower/fanout-phase'

export const PHASES = ['fanout', 'chaos', 'restart'] as const
export type Phase = typeof PHASES[number]

/** Everything one `bench:cluster` run does; every loop of the run is bounded by these counts and times. */
export interface ClusterPlan {
  name: 'full' | 'quick'
  phases: Phase[]
  /** Tower workers (node:cluster, one port, Redis bus) in the multi-instance cases. */
  workers: number
  fanout: FanoutPhasePlan & {
    /** Total streams, each measured with 1 instance (memory bus) and with `workers` instances. */
    streams: number[]
    /** Each pair measured this many times, alternating which goes first; rows give the medians. */
    rounds: number
  }
  chaos: {
    /** `tower-sse/client` clients, spread over processes of `clientsPerProcess`. */
    clients: number
    /** Bare `eventsource` package clients, in one process of their own. */
    eventSourceClients: number
    clientsPerProcess: number
    broadcastsPerSec: number
    durationMs: number
    /** A worker (never the primary) is SIGKILLed this often; the first after one quiet period. */
    killEveryMs: number
    connectTimeoutMs: number
    /** After the last broadcast: time for the last reconnects and replays to land. */
    drainMs: number
  }
  restart: {
    broadcastsPerSec: number
    /** Broadcasting before Redis is killed, while it is down, and after it is back. */
    beforeMs: number
    outageMs: number
    afterMs: number
    drainMs: number
  }
  /** How long one notify POST may take before its fate is called unknown. */
  notifyTimeoutMs: number
}

export const FULL_PLAN: Readonly<ClusterPlan> = Object.freeze({
  name: 'full',
  phases: [...PHASES],
  workers: 4,
  fanout: { streams: [1000, 10_000], rounds: 3, ...FANOUT_PHASE },
  chaos: {
    clients: 2000,
    eventSourceClients: 200,
    clientsPerProcess: 500,
    broadcastsPerSec: 20,
    durationMs: 120_000,
    killEveryMs: 15_000,
    connectTimeoutMs: 60_000,
    drainMs: 10_000
  },
  restart: { broadcastsPerSec: 20, beforeMs: 5000, outageMs: 5000, afterMs: 10_000, drainMs: 5000 },
  notifyTimeoutMs: NOTIFY_TIMEOUT_MS
})

/** A CI-sized smoke run (~60–90 s): same phases, fewer streams and clients, shorter. */
export const QUICK_PLAN: Readonly<ClusterPlan> = Object.freeze({
  ...FULL_PLAN,
  name: 'quick',
  fanout: { ...FULL_PLAN.fanout, streams: [200, 1000], rounds: 1, events: 8, warmupEvents: 2 },
  chaos: { ...FULL_PLAN.chaos, clients: 300, eventSourceClients: 40, clientsPerProcess: 150, durationMs: 20_000, killEveryMs: 8000, drainMs: 8000 },
  restart: { broadcastsPerSec: 20, beforeMs: 3000, outageMs: 3000, afterMs: 5000, drainMs: 3000 }
})

/**
 * The fan-out pair compares 1 instance with as many workers as there are CPUs at most, so it
 * measures the bus rather than CPU contention; plan.workers beyond the CPUs is a separate,
 * oversubscribed case.
 */
export function fanoutCases (workers: number, cpus: number): Array<{ setup: 'memory' | 'redis', instances: number }> {
  const paired = Math.max(1, Math.min(workers, cpus))
  return [{ setup: 'memory', instances: 1 }, { setup: 'redis', instances: paired }, ...(workers > paired ? [{ setup: 'redis' as const, instances: workers }] : [])]
}

export interface ParsedArgs {
  plan: ClusterPlan
  /** Where the results go; by default results/ for a full run, results/tmp/ for a quick one. */
  outDir: string | null
  help: boolean
  /** Only some phases or stream counts: not a full result set. */
  targeted: boolean
  /** Redraw cluster.md and cluster.svg from the cluster.json already in the output folder. */
  render: boolean
}

export const USAGE = `npm run bench:cluster [-- --quick] [-- --out=DIR] [-- --phases=fanout,chaos,restart] [-- --streams=1000,10000]
  --quick          CI-sized smoke run, written to benchmarks/results/tmp/ (never over the committed results)
  --out=DIR        write cluster.{json,md,svg} to DIR instead
  --phases=LIST    run only these phases (a targeted run: written to results/tmp/ unless --out)
  --streams=LIST   fan-out stream counts (a targeted run, as --phases)
  --rounds=N       fan-out rounds (a targeted run, as --phases)
  --render         redraw cluster.md and cluster.svg from cluster.json (no run)
`

function listArg (arg: string, name: string): string[] {
  const items = arg.slice(name.length + 3).split(',').filter((item) => item !== '')
  if (items.length === 0) throw new Error(`bench:cluster: --${name} needs a comma-separated list`)
  return items
}

export function parseArgs (argv: string[]): ParsedArgs {
  let plan: ClusterPlan = structuredClone(FULL_PLAN) as ClusterPlan
  let outDir: string | null = null
  let help = false
  let render = false
  const filters: { phases?: Phase[], streams?: number[], rounds?: number } = {}
  for (const arg of argv) {
    if (arg === '--quick') plan = structuredClone(QUICK_PLAN) as ClusterPlan
    else if (arg === '--help' || arg === '-h') help = true
    else if (arg === '--render') render = true
    else if (arg.startsWith('--out=') && arg.length > '--out='.length) outDir = arg.slice('--out='.length)
    else if (arg.startsWith('--phases=')) {
      const phases = listArg(arg, 'phases')
      for (const phase of phases) if (!(PHASES as readonly string[]).includes(phase)) throw new Error(`bench:cluster: unknown phase ${JSON.stringify(phase)} (known: ${PHASES.join(', ')})`)
      filters.phases = phases as Phase[]
    } else if (arg.startsWith('--streams=')) {
      filters.streams = listArg(arg, 'streams').map((text) => {
        const n = Number(text)
        if (!Number.isSafeInteger(n) || n < 1) throw new Error(`bench:cluster: --streams takes positive integers, got ${JSON.stringify(text)}`)
        return n
      })
    } else if (arg.startsWith('--rounds=')) {
      const rounds = Number(arg.slice('--rounds='.length))
      if (!Number.isSafeInteger(rounds) || rounds < 1) throw new Error(`bench:cluster: --rounds takes a positive integer, got ${JSON.stringify(arg.slice('--rounds='.length))}`)
      filters.rounds = rounds
    } else throw new Error(`bench:cluster: unknown argument ${JSON.stringify(arg)}\n${USAGE}`)
  }
  // Filters apply to whichever plan was picked, whatever the order of the arguments.
  if (filters.phases !== undefined) plan.phases = filters.phases
  if (filters.streams !== undefined) plan.fanout.streams = filters.streams
  if (filters.rounds !== undefined) plan.fanout.rounds = filters.rounds
  return { plan, outDir, help, render, targeted: Object.keys(filters).length > 0 }
}

/** Default output folder: a quick or targeted run never replaces the committed full results. */
export function defaultOutDir (resultsDir: string, plan: ClusterPlan, targeted: boolean): string {
  return plan.name === 'quick' || targeted ? `${resultsDir}/tmp` : resultsDir
}
