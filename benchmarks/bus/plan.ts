/** The stream route of every instance. */
export const STREAM_PATH = '/events'

/** Where events travel: the memory bus (one process, no Redis: the baseline) or the Redis bus. */
export const BUSES = ['memory', 'redis'] as const
export type BusKind = typeof BUSES[number]

/** The processes of one case: the memory bus is one instance by definition; the Redis bus N on one redis-server. */
export interface BusSetup { bus: BusKind, instances: number }

/** Everything one run does; every loop is bounded by these counts and times. */
export interface BusPlan {
  name: 'full' | 'quick'
  buses: BusKind[]
  /** Instance counts of the Redis bus (each its own process, all on one redis-server). */
  instances: number[]
  /** Streams open on each instance, held by the runner as raw sockets that read everything. */
  streams: number[]
  /** Event data sizes in bytes. */
  bytes: number[]
  /**
   * Capacity phase, a closed loop: each instance keeps this many publishes in flight and sends at
   * most this many in one turn of its event loop (the memory bus settles in the call itself).
   */
  inFlight: number
  /**
   * …or fewer for large events: at most this many bytes of event data in flight per instance
   * (64 KB: 16 events of 4 KB), so one turn's publishes never put far more on each stream than the
   * backlog gate allows. See inFlightFor.
   */
  inFlightBytes: number
  /**
   * …and sends nothing more while its streams' sockets hold more unsent bytes than this per stream
   * (on average): it publishes only as fast as the streams take what it delivers.
   */
  backlogBytesPerStream: number
  /** Unmeasured publishing before the capacity window (JIT, Redis's script cache, socket buffers). */
  warmupMs: number
  /** The capacity window: every instance at once; deliveries and CPU are read at its two ends. */
  measureMs: number
  /** Latency phase, an open loop: publishes scheduled at these shares of the measured capacity. */
  fractions: number[]
  /** Each share: this long at the rate unmeasured, then latencyMs measured. */
  latencyWarmupMs: number
  latencyMs: number
  /** Longest wait after each phase for every stream to have read every event (a shortfall is reported). */
  drainMs: number
}

export const FULL_PLAN: Readonly<BusPlan> = Object.freeze({
  name: 'full',
  buses: [...BUSES],
  instances: [1, 2, 4],
  streams: [10, 1000],
  bytes: [100, 4096],
  inFlight: 64,
  inFlightBytes: 64 * 1024,
  backlogBytesPerStream: 64 * 1024,
  warmupMs: 1000,
  measureMs: 5000,
  fractions: [0.25, 0.5, 0.75],
  latencyWarmupMs: 1000,
  latencyMs: 5000,
  drainMs: 10_000
})

/** The same cases with short windows: proves the harness in about a minute, measures nothing worth quoting. */
export const QUICK_PLAN: Readonly<BusPlan> = Object.freeze({
  ...FULL_PLAN,
  name: 'quick',
  warmupMs: 200,
  measureMs: 800,
  latencyWarmupMs: 150,
  latencyMs: 500,
  drainMs: 5000
})

/** Publishes each instance keeps in flight for events of `bytes`: plan.inFlight, or fewer to stay within plan.inFlightBytes. */
export function inFlightFor (plan: Pick<BusPlan, 'inFlight' | 'inFlightBytes'>, bytes: number): number {
  return Math.max(1, Math.min(plan.inFlight, Math.floor(plan.inFlightBytes / bytes)))
}

/** The plan's setups in the order they run: the memory baseline first, then Redis by instance count. */
export function setupsOf (plan: Pick<BusPlan, 'buses' | 'instances'>): BusSetup[] {
  return [
    ...(plan.buses.includes('memory') ? [{ bus: 'memory' as const, instances: 1 }] : []),
    ...(plan.buses.includes('redis') ? plan.instances.map((instances) => ({ bus: 'redis' as const, instances })) : [])
  ]
}

export interface RunArgs {
  plan: BusPlan
  outDir: string | null
  help: boolean
  /** A run narrower than the plan's (any filter): written to results/tmp/ unless --out says otherwise. */
  targeted: boolean
  /** Write a V8 CPU profile of every instance (--cpu-prof) beside the results, in profiles/. */
  cpuProfile: boolean
}

export const USAGE = 'usage: run [--quick] [--buses=memory,redis] [--instances=1,2,4] [--streams=10,1000] [--bytes=100,4096] ' +
  '[--fractions=0.25,0.5,0.75] [--in-flight=64] [--measure-ms=5000] [--latency-ms=5000] [--cpu-prof] [--out=DIR] [--force] [--help]'

function positiveIntegers (flag: string, text: string, max: number): number[] {
  const values = text.split(',').map(Number)
  if (values.some((n) => !Number.isSafeInteger(n) || n < 1 || n > max)) {
    throw new Error(`${flag} takes comma-separated integers 1-${max}, got "${text}"\n${USAGE}`)
  }
  return values
}

function fractions (text: string): number[] {
  const values = text.split(',').map(Number)
  if (values.some((n) => !Number.isFinite(n) || n <= 0 || n >= 1)) {
    throw new Error(`--fractions takes comma-separated shares of capacity between 0 and 1 (exclusive), got "${text}"\n${USAGE}`)
  }
  return values
}

/** Reads the command line; an unknown or malformed argument is an error that names it. */
export function parseArgs (argv: readonly string[]): RunArgs {
  const base = argv.includes('--quick') ? QUICK_PLAN : FULL_PLAN
  const plan: BusPlan = { ...base, buses: [...base.buses], instances: [...base.instances], streams: [...base.streams], bytes: [...base.bytes], fractions: [...base.fractions] }
  let outDir: string | null = null
  let help = false
  let targeted = false
  let cpuProfile = false
  for (const arg of argv) {
    const [flag, value] = arg.split(/=(.*)/s, 2)
    if (arg === '--quick') continue
    if (arg === '--help') help = true
    else if (arg === '--cpu-prof') cpuProfile = true
    else if (flag === '--instances' && value !== undefined) plan.instances = positiveIntegers(flag, value, 8)
    else if (flag === '--streams' && value !== undefined) plan.streams = positiveIntegers(flag, value, 5000)
    else if (flag === '--bytes' && value !== undefined) plan.bytes = positiveIntegers(flag, value, 1024 * 1024)
    else if (flag === '--in-flight' && value !== undefined) plan.inFlight = positiveIntegers(flag, value, 1000)[0]
    else if (flag === '--measure-ms' && value !== undefined) plan.measureMs = positiveIntegers(flag, value, 600_000)[0]
    else if (flag === '--latency-ms' && value !== undefined) plan.latencyMs = positiveIntegers(flag, value, 600_000)[0]
    else if (flag === '--fractions' && value !== undefined) plan.fractions = fractions(value)
    else if (flag === '--buses' && value !== undefined) {
      const buses = value.split(',')
      const unknown = buses.find((bus) => !(BUSES as readonly string[]).includes(bus))
      if (unknown !== undefined) throw new Error(`--buses: unknown bus "${unknown}"; known: ${BUSES.join(', ')}\n${USAGE}`)
      plan.buses = buses as BusKind[]
    } else if (flag === '--out' && value !== undefined && value !== '') outDir = value
    else throw new Error(`unknown or malformed argument "${arg}"\n${USAGE}`)
    if (flag !== '--out' && arg !== '--help' && arg !== '--cpu-prof') targeted = true
  }
  return { plan, outDir, help, targeted, cpuProfile }
}
