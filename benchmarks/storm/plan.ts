import path from 'node:path'
import { parseArgs } from 'node:util'
import { repoRoot } from '../lib/repo-root'
import { POPULATION_NAMES, type PopulationName } from '../lib/populations/names'
import { parsePreset, SERVER_VARIANTS, unavailableReason, type ServerVariant } from './servers'

/** Everything one storm run will do, from the command line. */
export interface StormPlan {
  quick: boolean
  /** Servers of the storm matrix and the refusal-path comparison, in table order. */
  servers: ServerVariant[]
  /** Variants this build of the plugin cannot run, with its reason. */
  skipped: Array<{ server: string, reason: string }>
  populations: PopulationName[]
  /** Clients per population: a fixed number, or clientsPerCap × each server's capacity. */
  clients: number | null
  clientsPerCap: number
  warmupSeconds: number
  durationSeconds: number
  /** Length of each run in the narrowed-port namespace; 0 skips them. */
  narrowedSeconds: number
  /** Length of each refusal-path measurement; 0 skips it. */
  rejectionSeconds: number
  /** A discarded refusal-path run before each measurement (JIT warm-up; none in --quick). */
  rejectionWarmupSeconds: number
  rejectionConnections: number
  /** Seconds the restarted server counts reconnects in the restart runs; 0 skips them. */
  restartSeconds: number
  hammerDelayMs: number
  stormRate: number
  outDir: string
}

export const USAGE = `npm run bench:storm -- [options]

  --quick                    short runs (under 90 s), for a smoke test; figures are not comparable
  --servers a,b              servers to run (default: all): ${SERVER_VARIANTS.filter((v) => v.rejectionOnly !== true).map((v) => v.name).join(', ')};
                             refusal path only: ${SERVER_VARIANTS.filter((v) => v.rejectionOnly === true).map((v) => v.name).join(', ')}
  --populations a,b          populations to run (default: all): ${POPULATION_NAMES.join(', ')}
  --preset name=JSON         add a tower-sse server with these plugin options (repeatable)
  --clients N                clients per population for every server (default: clients-per-cap × cap)
  --clients-per-cap R        clients per population as a multiple of each server's cap (default 2)
  --warmup S                 seconds before the measured window (default 5, quick 1)
  --duration S               seconds of the measured window (default 15, quick 1)
  --narrowed S               seconds of each run with ~1,000 ephemeral ports; 0 skips (default 8, quick 0)
  --rejection S              seconds of each refusal-path measurement; 0 skips (default 5, quick 1)
  --rejection-connections N  concurrent request loops for the refusal path (default 10)
  --restart S                seconds to count reconnects after restarting a full server (browser and
                             client populations, clients = cap); 0 skips (default 20, quick 0)
  --hammer-delay-ms MS       hammer's pause before reconnecting (default 50)
  --storm-rate N             autocannon requests per second (default 825, i.e. 49.5K/min)
  --out DIR                  where storm.json, storm.md and storm.svg go (default benchmarks/results,
                             benchmarks/results/tmp for --quick)
  --force                    write the committed results even when the run starts on a busy machine
                             (load average above half the CPUs; otherwise they go to results/tmp)
`

const FULL = { warmup: 5, duration: 15, narrowed: 8, rejection: 5, rejectionWarmup: 1, restart: 20 }
const QUICK = { warmup: 1, duration: 1, narrowed: 0, rejection: 1, rejectionWarmup: 0, restart: 0 }

/** Reads the command line; every bad value is refused with a message naming the option. */
export function parsePlan (argv: string[]): StormPlan {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      quick: { type: 'boolean', default: false },
      servers: { type: 'string' },
      populations: { type: 'string' },
      preset: { type: 'string', multiple: true, default: [] },
      clients: { type: 'string' },
      'clients-per-cap': { type: 'string', default: '2' },
      warmup: { type: 'string' },
      duration: { type: 'string' },
      narrowed: { type: 'string' },
      rejection: { type: 'string' },
      'rejection-connections': { type: 'string', default: '10' },
      restart: { type: 'string' },
      'hammer-delay-ms': { type: 'string', default: '50' },
      'storm-rate': { type: 'string', default: '825' },
      out: { type: 'string' }
    }
  })
  const defaults = values.quick === true ? QUICK : FULL
  const int = (name: string, text: string | undefined, fallback: number, min: number): number => {
    const value = text === undefined ? fallback : Number(text)
    if (!Number.isSafeInteger(value) || value < min) throw new Error(`--${name} must be an integer >= ${min}, got ${JSON.stringify(text)}`)
    return value
  }
  const clientsPerCap = Number(values['clients-per-cap'])
  if (!(clientsPerCap > 0) || !Number.isFinite(clientsPerCap)) {
    throw new Error(`--clients-per-cap must be a number > 0, got ${JSON.stringify(values['clients-per-cap'])}`)
  }
  const variants = [...SERVER_VARIANTS, ...(values.preset ?? []).map(parsePreset)]
  const names = variants.map((v) => v.name)
  const twice = names.find((name, i) => names.indexOf(name) !== i)
  if (twice !== undefined) throw new Error(`--preset: a server named "${twice}" already exists`)
  const chosen = pick('servers', values.servers, variants.filter((v) => v.rejectionOnly !== true).map((v) => v.name), names)
  const wanted = variants.filter((v) => chosen.includes(v.name) || (v.rejectionOnly === true && values.servers === undefined))
  const skipped = wanted.flatMap((v) => {
    const reason = unavailableReason(v)
    return reason === null ? [] : [{ server: v.name, reason }]
  })
  return {
    quick: values.quick === true,
    servers: wanted.filter((v) => !skipped.some((s) => s.server === v.name)),
    skipped,
    populations: pick('populations', values.populations, POPULATION_NAMES, POPULATION_NAMES),
    clients: values.clients === undefined ? null : int('clients', values.clients, 0, 1),
    clientsPerCap,
    warmupSeconds: int('warmup', values.warmup, defaults.warmup, 0),
    durationSeconds: int('duration', values.duration, defaults.duration, 1),
    narrowedSeconds: int('narrowed', values.narrowed, defaults.narrowed, 0),
    rejectionSeconds: int('rejection', values.rejection, defaults.rejection, 0),
    rejectionWarmupSeconds: defaults.rejectionWarmup,
    rejectionConnections: int('rejection-connections', values['rejection-connections'], 10, 1),
    restartSeconds: int('restart', values.restart, defaults.restart, 0),
    hammerDelayMs: int('hammer-delay-ms', values['hammer-delay-ms'], 50, 0),
    stormRate: int('storm-rate', values['storm-rate'], 825, 1),
    // A quick run is a smoke test: it must not replace the full run's committed results.
    outDir: path.resolve(values.out ?? path.join(repoRoot(__dirname), 'benchmarks', 'results', ...(values.quick === true ? ['tmp'] : [])))
  }
}

/** A comma list of known names (all of `fallback` when absent); an unknown name is refused. */
function pick<T extends string> (option: string, text: string | undefined, fallback: readonly T[], known: readonly string[]): T[] {
  if (text === undefined) return [...fallback]
  const names = text.split(',').map((name) => name.trim()).filter((name) => name !== '')
  const unknown = names.filter((name) => !known.includes(name))
  if (unknown.length > 0 || names.length === 0) {
    throw new Error(`--${option}: unknown ${JSON.stringify(unknown.join(','))}; choose from ${known.join(', ')}`)
  }
  return names as T[]
}
