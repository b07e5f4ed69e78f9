import type { PopulationName } from '../lib/populations/names'
import type { NotifyPlan } from './post-window'

/** One client population of the steady load (lib/populations), keyed by its own clientId. */
export interface SteadyGroup { population: PopulationName, size: number }

/** Everything one `bench:soak` run does; every loop of the run is bounded by these counts and times. */
export interface SoakPlan {
  name: 'full' | 'quick'
  durationMs: number
  /** 1: one process on the memory bus. More: node:cluster on Redis, with a Redis restart and a worker kill. */
  workers: number
  /** GET /metrics (and the TIME_WAIT count) this often. */
  sampleEveryMs: number
  steady: {
    /** Sequence-accounted clients (lib/clients/seq-client): tower-sse/client tabs and spec EventSources. */
    seqClients: number
    seqEventSources: number
    seqPerProcess: number
    /** The rest of the steady load, counted by the server only. */
    groups: SteadyGroup[]
  }
  /**
   * Storm waves: a population that ignores Retry-After (autocannon, a new TCP connection per request),
   * capped by its own key at `slots` streams. autocannon keeps no more connections than its rate
   * (1 request/s each), and Tower's tarpit holds up to 1,000 refusals (MAX_HELD_REFUSALS) about 5 s
   * each, so of 1,650/s offered about 200/s + 650/s arrive: the seed's 49.5K/min.
   */
  storm: { firstAtMs: number, everyMs: number, durationMs: number, perSec: number, connections: number, slots: number }
  /**
   * Sequenced notifies on a schedule: `perSec`, and every `burstEveryMs` a burst of `burstSize` due
   * at once; up to `inFlight` out at a time, retired in order (post-window.ts), each POST given
   * `timeoutMs`. One at a time the round trip capped the run at ~318/s (572,001 in 30 min).
   */
  notify: NotifyPlan
  /** Redis run only: Redis SIGKILLed (no persistence) at this share of the run for `outageMs`; a worker SIGKILLed at `killWorkerAt`. */
  incidents: { restartRedisAt: number, outageMs: number, killWorkerAt: number }
  /** Tower's flags: short max age so every stream churns, history long enough to replay a reconnect's gap. */
  tower: {
    maxAgeMs: number
    retryMs: number
    heartbeatMs: number
    logIntervalMs: number
    historyEvents: number
    historyBytes: number
    /** A client's unsent-bytes budget: as large as the history, so any replay it holds can be written. */
    maxBufferedBytes: number
  }
  /** After the last notify: longest wait for every accounted client to have every accepted event before accounting. */
  drainMs: number
  /** After the clients leave: longest wait for Tower's open files to come back to the baseline. */
  settleMs: number
}

const MINUTE = 60_000

export const FULL_PLAN: Readonly<SoakPlan> = Object.freeze({
  name: 'full',
  durationMs: 30 * MINUTE,
  workers: 1,
  sampleEveryMs: 10_000,
  steady: {
    seqClients: 20,
    seqEventSources: 10,
    seqPerProcess: 20,
    groups: [{ population: 'client', size: 10 }, { population: 'backoff', size: 10 }, { population: 'dashboard', size: 5 }] as SteadyGroup[]
  },
  // 90 s of ~825 attempts/s arriving every 3 min: ~740K attempts in 30 min.
  storm: { firstAtMs: MINUTE, everyMs: 3 * MINUTE, durationMs: 90_000, perSec: 1650, connections: 1650, slots: 100 },
  // 560/s plus 400 every 20 s: 1,043,601 due in 30 min (556/s sustained is 1,000,000). 32 in flight
  // keep that rate through a round trip of up to ~55 ms (Little's law: 32 ÷ 580/s).
  notify: { perSec: 560, burstEveryMs: 20_000, burstSize: 400, timeoutMs: 3000, inFlight: 32 },
  incidents: { restartRedisAt: 0.4, outageMs: 5000, killWorkerAt: 0.7 },
  tower: {
    maxAgeMs: 60_000,
    retryMs: 1000,
    heartbeatMs: 15_000,
    logIntervalMs: 30_000,
    historyEvents: 20_000,
    historyBytes: 8 * 1024 * 1024,
    maxBufferedBytes: 8 * 1024 * 1024
  },
  drainMs: 120_000,
  settleMs: 20_000
})

/** ≈3 minutes: the same traffic, waves every minute. */
export const QUICK_PLAN: Readonly<SoakPlan> = Object.freeze({
  ...FULL_PLAN,
  name: 'quick',
  durationMs: 3 * MINUTE,
  storm: { ...FULL_PLAN.storm, firstAtMs: 30_000, everyMs: MINUTE, durationMs: 20_000 }
})

export interface ParsedArgs {
  plan: SoakPlan
  /** Where soak.{json,md,svg} go; by default results/ for a full run, results/tmp/ otherwise. */
  outDir: string | null
  help: boolean
  /** --minutes shortened or lengthened the plan: not the run. */
  targeted: boolean
}

export const USAGE = `npm run bench:soak [-- --quick] [-- --minutes=N] [-- --workers=2] [-- --out=DIR]
  --quick        ≈3 min smoke run, written to benchmarks/results/tmp/
  --minutes=N    run N minutes (waves keep their period; below 30 it is written to results/tmp/)
  --workers=N    N>1: node:cluster workers on a Redis bus, Redis restarted and a worker killed inside the run
  --out=DIR      write soak.{json,md,svg} to DIR instead (a run with the other worker count is kept beside it)
  --force        write over the committed results even if the machine was busy when the run started
`

function positiveInteger (flag: string, text: string, max: number): number {
  const n = Number(text)
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1 || n > max) throw new Error(`bench:soak: ${flag} takes an integer 1-${max}, got ${JSON.stringify(text)}`)
  return n
}

export function parseArgs (argv: string[]): ParsedArgs {
  let plan = structuredClone(FULL_PLAN) as SoakPlan
  let outDir: string | null = null
  let help = false
  let minutes: number | null = null
  let workers: number | null = null
  for (const arg of argv) {
    if (arg === '--quick') plan = structuredClone(QUICK_PLAN) as SoakPlan
    else if (arg === '--help' || arg === '-h') help = true
    else if (arg.startsWith('--out=') && arg.length > '--out='.length) outDir = arg.slice('--out='.length)
    else if (arg.startsWith('--minutes=')) minutes = positiveInteger('--minutes', arg.slice('--minutes='.length), 24 * 60)
    else if (arg.startsWith('--workers=')) workers = positiveInteger('--workers', arg.slice('--workers='.length), 16)
    else throw new Error(`bench:soak: unknown argument ${JSON.stringify(arg)}\n${USAGE}`)
  }
  // Knobs apply to whichever plan was picked, whatever the order of the arguments.
  if (minutes !== null) plan.durationMs = minutes * MINUTE
  if (workers !== null) plan.workers = workers
  const targeted = minutes !== null && plan.durationMs < FULL_PLAN.durationMs
  return { plan, outDir, help, targeted }
}

/** Start times (ms from the run's start) of the storm waves that fit wholly inside the run. */
export function waveStarts (plan: SoakPlan): number[] {
  const starts: number[] = []
  for (let at = plan.storm.firstAtMs; at + plan.storm.durationMs <= plan.durationMs; at += plan.storm.everyMs) starts.push(at)
  return starts
}

/**
 * The storm's client address, as its X-Forwarded-For gives it to Tower trusting loopback. Tower
 * keys streams by address, and every other client of the run is 127.0.0.1: without a key of its
 * own the storm would fill theirs and refuse the steady clients' reconnects.
 */
export const STORM_ADDRESS = '127.0.0.2'

/** Streams Tower must hold: the steady clients plus the storm's own slots, with room for reconnects in flight. */
export function maxClients (plan: SoakPlan): number {
  const steady = plan.steady.seqClients + plan.steady.seqEventSources + plan.steady.groups.reduce((sum, g) => sum + g.size, 0)
  return 2 * steady + plan.storm.slots
}

/** Tower's flags for the plan: the steady and storm clients fit, every stream churns, replays cover a reconnect's gap. */
export function towerFlags (plan: SoakPlan): string[] {
  const { tower } = plan
  return [
    '--max-clients', String(maxClients(plan)),
    '--max-clients-per-key', String(plan.storm.slots),
    // The storm says it comes from STORM_ADDRESS through a proxy on loopback: a key of its own.
    '--trust-proxy', '127.0.0.1',
    '--max-age-ms', String(tower.maxAgeMs),
    '--retry-ms', String(tower.retryMs),
    '--heartbeat-ms', String(tower.heartbeatMs),
    '--log-interval-ms', String(tower.logIntervalMs),
    '--history-events', String(tower.historyEvents),
    '--history-bytes', String(tower.historyBytes),
    '--max-buffered-bytes', String(tower.maxBufferedBytes)
  ]
}
