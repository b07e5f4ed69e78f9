/** The stream route of every instance. */
export const STREAM_PATH = '/events'

/** How each instance sends its publishes: one script call each, or the turn's in one pipeline. */
export const PUBLISH_MODES = ['unbatched', 'batched'] as const
export type PublishMode = typeof PUBLISH_MODES[number]

/** The plugin's maxPublishBatch for each mode (batched: the plugin's default). */
export const MAX_PUBLISH_BATCH: Record<PublishMode, number> = { unbatched: 1, batched: 100 }

/** Everything one run does; every loop is bounded by these counts and times. */
export interface BusPlan {
  name: 'full' | 'quick'
  /** Instances (one process each) on the one redis-server. */
  instances: number[]
  /** Streams open on each instance, held by the runner as raw sockets that read everything. */
  streams: number[]
  /** Event data sizes in bytes. */
  bytes: number[]
  modes: PublishMode[]
  /** Publishes each instance keeps in flight: a closed loop, the next sent as one settles. */
  inFlight: number
  /** Unmeasured publishing before each measurement (JIT, Redis's script cache, socket buffers). */
  warmupMs: number
  /** Each measurement: publishing for this long on every instance at once. */
  measureMs: number
}

export const FULL_PLAN: Readonly<BusPlan> = Object.freeze({
  name: 'full',
  instances: [1, 2],
  streams: [10, 1000],
  bytes: [100, 4096],
  modes: [...PUBLISH_MODES],
  inFlight: 64,
  warmupMs: 1000,
  measureMs: 5000
})

export const QUICK_PLAN: Readonly<BusPlan> = Object.freeze({
  ...FULL_PLAN,
  name: 'quick',
  streams: [10, 200],
  warmupMs: 300,
  measureMs: 1000
})

export interface RunArgs {
  plan: BusPlan
  outDir: string | null
  help: boolean
  /** A run narrower than the plan's (any filter): written to results/tmp/ unless --out says otherwise. */
  targeted: boolean
}

export const USAGE = 'usage: run [--quick] [--instances=1,2] [--streams=10,1000] [--bytes=100,4096] [--modes=unbatched,batched] ' +
  '[--in-flight=64] [--measure-ms=5000] [--out=DIR] [--force] [--help]'

function positiveIntegers (flag: string, text: string, max: number): number[] {
  const values = text.split(',').map(Number)
  if (values.some((n) => !Number.isSafeInteger(n) || n < 1 || n > max)) {
    throw new Error(`${flag} takes comma-separated integers 1-${max}, got "${text}"\n${USAGE}`)
  }
  return values
}

/** Reads the command line; an unknown or malformed argument is an error that names it. */
export function parseArgs (argv: readonly string[]): RunArgs {
  const base = argv.includes('--quick') ? QUICK_PLAN : FULL_PLAN
  const plan: BusPlan = { ...base, instances: [...base.instances], streams: [...base.streams], bytes: [...base.bytes], modes: [...base.modes] }
  let outDir: string | null = null
  let help = false
  let targeted = false
  for (const arg of argv) {
    const [flag, value] = arg.split(/=(.*)/s, 2)
    if (arg === '--quick') continue
    if (arg === '--help') help = true
    else if (flag === '--instances' && value !== undefined) plan.instances = positiveIntegers(flag, value, 8)
    else if (flag === '--streams' && value !== undefined) plan.streams = positiveIntegers(flag, value, 5000)
    else if (flag === '--bytes' && value !== undefined) plan.bytes = positiveIntegers(flag, value, 1024 * 1024)
    else if (flag === '--in-flight' && value !== undefined) plan.inFlight = positiveIntegers(flag, value, 1000)[0]
    else if (flag === '--measure-ms' && value !== undefined) plan.measureMs = positiveIntegers(flag, value, 600_000)[0]
    else if (flag === '--modes' && value !== undefined) {
      const modes = value.split(',')
      const unknown = modes.find((mode) => !(PUBLISH_MODES as readonly string[]).includes(mode))
      if (unknown !== undefined) throw new Error(`--modes: unknown mode "${unknown}"; known: ${PUBLISH_MODES.join(', ')}\n${USAGE}`)
      plan.modes = modes as PublishMode[]
    } else if (flag === '--out' && value !== undefined && value !== '') outDir = value
    else throw new Error(`unknown or malformed argument "${arg}"\n${USAGE}`)
    if (flag !== '--out' && arg !== '--help') targeted = true
  }
  return { plan, outDir, help, targeted }
}
