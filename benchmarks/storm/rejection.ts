import { setTimeout as sleep } from 'node:timers/promises'
import http from 'node:http'
import { Histogram } from '../lib/histogram'
import { PopulationProcess } from '../lib/populations/process'
import { ServerProcess } from './children'
import type { PopulationSettings } from '../lib/populations/contract'
import { BARE_503, capacityOf, type ServerVariant } from './servers'

/** What the refusal load saw against one server. */
export interface RefusalMeasurement {
  requestsPerSec: number
  p99Ms: number
  /** Answers by status code (a full server should answer only refusals). */
  statusCodes: Record<string, number>
  errors: number
}

/** One server's refusal path under load at full speed while its streams are all taken. */
export interface RejectionResult extends RefusalMeasurement {
  server: string
  /** The bare Fastify 503 route, measured right before this server (so both see the same machine). */
  bare: RefusalMeasurement
  /** requestsPerSec and p99Ms relative to that bare route. */
  throughputRatio: number
  p99Ratio: number
}

export interface RejectionPlan {
  variants: ServerVariant[]
  seconds: number
  warmupSeconds: number
  connections: number
  settings: PopulationSettings
}

const FILL_TIMEOUT_MS = 15_000

/** For each variant: the bare 503 route, then the variant full to capacity. */
export async function runRejection (plan: RejectionPlan, onServer: (name: string) => void = () => {}): Promise<RejectionResult[]> {
  const results: RejectionResult[] = []
  for (const variant of plan.variants) {
    onServer(`${BARE_503.name} (yardstick for ${variant.name})`)
    const bare = await measureFull(BARE_503, plan)
    onServer(variant.name)
    const full = await measureFull(variant, plan)
    results.push({
      server: variant.name,
      ...full,
      bare,
      throughputRatio: full.requestsPerSec / bare.requestsPerSec,
      p99Ratio: full.p99Ms / bare.p99Ms
    })
  }
  return results
}

async function measureFull (variant: ServerVariant, plan: RejectionPlan): Promise<RefusalMeasurement> {
  const label = `${variant.name} refusals`
  const capacity = capacityOf(variant)
  const filler = capacity > 0 ? new PopulationProcess('browser', capacity, plan.settings, label) : null
  const server = await ServerProcess.start(variant, label).catch(async (error: unknown) => {
    await filler?.exit()
    throw error
  })
  try {
    if (filler !== null) {
      await filler.start(server.url)
      await waitUntilFull(server, capacity)
    }
    if (plan.warmupSeconds > 0) await refusalLoad(server.url, plan.connections, plan.warmupSeconds)
    return await refusalLoad(server.url, plan.connections, plan.seconds)
  } finally {
    await filler?.exit()
    await server.exit()
  }
}

async function waitUntilFull (server: ServerProcess, capacity: number): Promise<void> {
  const deadline = Date.now() + FILL_TIMEOUT_MS
  for (let stats = await server.stats(); stats.open < capacity; stats = await server.stats()) {
    if (Date.now() > deadline) throw new Error(`only ${stats.open} of ${capacity} streams open after ${FILL_TIMEOUT_MS} ms`)
    await sleep(100)
  }
}

/**
 * `connections` loops, each asking again as soon as an answer has ended, on a new TCP connection
 * each time, for `seconds`. Not autocannon: tower-sse's refusals carry no length (the body ends
 * when the server closes, so the server closes first), and autocannon reconnects on a close
 * without ever completing such a response; Node's own client reads it like any browser.
 */
async function refusalLoad (url: string, connections: number, seconds: number): Promise<RefusalMeasurement> {
  const latency = new Histogram()
  const statusCodes: Record<string, number> = {}
  let errors = 0
  const startedAt = Date.now()
  const endAt = startedAt + seconds * 1000
  const once = (): Promise<void> => new Promise((resolve) => {
    const sent = process.hrtime.bigint()
    const request = http.get(url, { agent: false }, (response) => {
      response.resume()
      response.once('end', () => {
        statusCodes[String(response.statusCode)] = (statusCodes[String(response.statusCode)] ?? 0) + 1
        latency.record(Number(process.hrtime.bigint() - sent) / 1e6)
        resolve()
      })
      response.once('error', () => { errors++; resolve() })
    })
    request.once('error', () => { errors++; resolve() })
  })
  await Promise.all(Array.from({ length: connections }, async () => {
    while (Date.now() < endAt) await once()
  }))
  const answered = Object.values(statusCodes).reduce((sum, n) => sum + n, 0)
  return { requestsPerSec: answered * 1000 / (Date.now() - startedAt), p99Ms: latency.count > 0 ? latency.quantile(0.99) : 0, statusCodes, errors }
}
