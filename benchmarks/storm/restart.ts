import { setTimeout as sleep } from 'node:timers/promises'
import { PopulationProcess } from '../lib/populations/process'
import { ServerProcess } from './children'
import type { PopulationName } from '../lib/populations/names'
import type { PopulationSettings } from '../lib/populations/contract'
import type { ServerVariant } from './servers'

export interface RestartSpec {
  server: ServerVariant
  population: PopulationName
  clients: number
  /** How long the restarted server counts the clients coming back. */
  seconds: number
  settings: PopulationSettings
}

/** How the clients of a full server came back after it was restarted. */
export interface RestartResult {
  server: string
  population: PopulationName
  clients: number
  /** Streams open before the shutdown, and on the restarted server at the end. */
  connectedBefore: number
  readmitted: number
  /** The old server's close(), in ms (its drain, for tower-sse). */
  closeMs: number
  /** Connects the restarted server counted in each second after it listened. */
  perSecond: number[]
  /** Seconds from the first to the last second with reconnects, both included. */
  spanSeconds: number
  busiestPerSecond: number
  averagePerSecond: number
  /** busiest / average over the span: 1 is perfectly even, `spanSeconds` is everyone at once. */
  busiestOverAverage: number
}

const CONNECT_WAIT_MS = 20_000

/**
 * A restart with every stream taken: the clients fill the server, it shuts down the way it does
 * (tower-sse: staged drain), a new server process takes over the same port, and it counts the
 * reconnects in each second. What matters is whether they come back spread or in one burst.
 */
export async function runRestart (spec: RestartSpec): Promise<RestartResult> {
  const label = `restart ${spec.server.name} × ${spec.population}`
  const population = new PopulationProcess(spec.population, spec.clients, spec.settings, label)
  try {
    const first = await ServerProcess.start(spec.server, label)
    let connectedBefore = 0
    let closeMs = 0
    try {
      await population.start(first.url)
      const deadline = Date.now() + CONNECT_WAIT_MS
      while ((connectedBefore = (await first.stats()).open) < spec.clients && Date.now() < deadline) await sleep(100)
      const closing = Date.now()
      await first.stop()
      closeMs = Date.now() - closing
    } finally {
      await first.exit()
    }
    const second = await ServerProcess.start(spec.server, label, first.port)
    try {
      const startedAt = Date.now()
      const perSecond: number[] = []
      let previous = (await second.stats()).connects
      for (let s = 1; s <= spec.seconds; s++) {
        await sleep(Math.max(0, startedAt + s * 1000 - Date.now()))
        const { connects } = await second.stats()
        perSecond.push(connects - previous)
        previous = connects
      }
      return summarize(spec, connectedBefore, (await second.stats()).open, closeMs, perSecond)
    } finally {
      await second.exit()
    }
  } finally {
    await population.stop().catch(() => {})
    await population.exit()
  }
}

function summarize (spec: RestartSpec, connectedBefore: number, readmitted: number, closeMs: number, perSecond: number[]): RestartResult {
  const first = perSecond.findIndex((n) => n > 0)
  const last = perSecond.length - 1 - [...perSecond].reverse().findIndex((n) => n > 0)
  const spanSeconds = first === -1 ? 0 : last - first + 1
  const total = perSecond.reduce((sum, n) => sum + n, 0)
  const busiestPerSecond = Math.max(0, ...perSecond)
  const averagePerSecond = spanSeconds === 0 ? 0 : total / spanSeconds
  return {
    server: spec.server.name,
    population: spec.population,
    clients: spec.clients,
    connectedBefore,
    readmitted,
    closeMs,
    perSecond,
    spanSeconds,
    busiestPerSecond,
    averagePerSecond,
    busiestOverAverage: averagePerSecond === 0 ? 0 : busiestPerSecond / averagePerSecond
  }
}
