import { setTimeout as sleep } from 'node:timers/promises'
import { countTimeWait, type TimeWaitCount } from '../lib/time-wait'
import type { PopulationName } from '../lib/populations/names'
import type { PopulationSettings } from '../lib/populations/contract'
import { PopulationProcess } from '../lib/populations/process'
import { ServerProcess } from './children'
import { capacityOf, type ServerVariant } from './servers'
import type { ClientStats } from '../lib/populations/stats'
import { eluBetween, perMinute, type ServerStats } from './stats'

/** One server × population run: clients start together, warm up, then a measured window. */
export interface ScenarioSpec {
  server: ServerVariant
  population: PopulationName
  clients: number
  warmupSeconds: number
  durationSeconds: number
  settings: PopulationSettings
}

/** What one run measured; rates and counts cover the window after the warm-up. */
export interface ScenarioResult {
  server: string
  population: PopulationName
  clients: number
  capacity: number
  /** Length of the measured window, in seconds. */
  windowSeconds: number
  /** Requests to the events route per minute, as the server counted them. */
  connectsPerMin: number
  /** Connection attempts per minute, as the clients counted them. */
  clientConnectsPerMin: number
  /** New TCP connections per minute at the server (below connectsPerMin when sockets are reused). */
  tcpConnectsPerMin: number
  admitted: number
  rejected: number
  evicted: number
  expired: number
  /** TIME_WAIT on the server's port, sampled each second: peak over the run and at the window's end. */
  clientTimeWait: number
  clientTimeWaitEnd: number
  serverTimeWait: number
  serverTimeWaitEnd: number
  /** Failed attempts by error code over the whole run. */
  clientErrors: Record<string, number>
  /** Clients that stopped reconnecting for good. */
  gaveUp: number
  /** Lines the server logged from the moment it listened to its shutdown, and per started 30 s of that. */
  logLines: number
  logLinesPer30s: number
  /** The server's peak resident set size, in MiB. */
  rssMB: number
  /** The server's event-loop utilisation over the window, 0..1. */
  elu: number
  /** Server-counted connects in each second since the clients started. */
  timeline: number[]
}

const LOG_WINDOW_MS = 30_000

interface Edge {
  server: ServerStats
  clients: ClientStats
}

/** Starts the server and the population in processes of their own, measures, stops both. */
export async function runScenario (spec: ScenarioSpec, onSecond: (second: number) => void = () => {}): Promise<ScenarioResult> {
  const label = `${spec.server.name} × ${spec.population}`
  const population = new PopulationProcess(spec.population, spec.clients, spec.settings, label)
  try {
    const server = await ServerProcess.start(spec.server, label)
    try {
      return await measure(spec, server, population, onSecond)
    } finally {
      await server.exit()
    }
  } finally {
    await population.exit()
  }
}

async function measure (
  spec: ScenarioSpec, server: ServerProcess, population: PopulationProcess, onSecond: (second: number) => void
): Promise<ScenarioResult> {
  const born = await server.stats()
  await population.start(server.url)
  const startedAt = Date.now()
  const total = spec.warmupSeconds + spec.durationSeconds
  const timeline: number[] = []
  const timeWait: TimeWaitCount[] = []
  let previous = born
  let windowStart: Edge | undefined
  let windowEnd: Edge | undefined
  for (let second = 0; second <= total; second++) {
    await sleep(Math.max(0, startedAt + second * 1000 - Date.now()))
    const edge = second === spec.warmupSeconds || second === total
    // At the window's edges both sides are asked at once, so their counts cover the same span.
    const [now, clients] = await Promise.all([server.stats(), edge ? population.stats() : null])
    timeWait.push(countTimeWait(server.port))
    if (second > 0) timeline.push(now.connects - previous.connects)
    previous = now
    if (clients !== null && second === spec.warmupSeconds) windowStart = { server: now, clients }
    if (clients !== null && second === total) windowEnd = { server: now, clients }
    onSecond(second)
  }
  if (windowStart === undefined || windowEnd === undefined) throw new Error('unreachable: the window edges lie inside the loop')
  await population.stop()
  const last = await server.stop()
  return summarize(spec, { born, last, windowStart, windowEnd, timeline, timeWait })
}

interface Samples {
  born: ServerStats
  last: ServerStats
  windowStart: Edge
  windowEnd: Edge
  timeline: number[]
  timeWait: TimeWaitCount[]
}

function summarize (spec: ScenarioSpec, samples: Samples): ScenarioResult {
  const { born, last, windowStart: from, windowEnd: to, timeline, timeWait } = samples
  const serverMs = to.server.at - from.server.at
  const delta = (key: 'connects' | 'tcpConnects' | 'admitted' | 'rejected' | 'evicted' | 'expired'): number =>
    to.server[key] - from.server[key]
  const endTimeWait = timeWait[timeWait.length - 1]
  return {
    server: spec.server.name,
    population: spec.population,
    clients: spec.clients,
    capacity: capacityOf(spec.server),
    windowSeconds: serverMs / 1000,
    connectsPerMin: perMinute(delta('connects'), serverMs),
    clientConnectsPerMin: perMinute(to.clients.attempts - from.clients.attempts, to.clients.at - from.clients.at),
    tcpConnectsPerMin: perMinute(delta('tcpConnects'), serverMs),
    admitted: delta('admitted'),
    rejected: delta('rejected'),
    evicted: delta('evicted'),
    expired: delta('expired'),
    clientTimeWait: Math.max(...timeWait.map((count) => count.client)),
    clientTimeWaitEnd: endTimeWait.client,
    serverTimeWait: Math.max(...timeWait.map((count) => count.server)),
    serverTimeWaitEnd: endTimeWait.server,
    clientErrors: to.clients.errors,
    gaveUp: to.clients.gaveUp,
    logLines: last.logLines - born.logLines,
    logLinesPer30s: (last.logLines - born.logLines) / Math.max(1, Math.ceil((last.at - born.at) / LOG_WINDOW_MS)),
    rssMB: last.maxRssBytes / 2 ** 20,
    elu: eluBetween(from.server, to.server),
    timeline
  }
}
