import { Histogram } from '../lib/histogram'
import { IpcClient } from '../lib/ipc'
import { admit, requireFiles, shares, spawnClient, spawnServer, SPARE_FILES } from '../lib/fanout/rig'
import type { ContenderName } from '../lib/fanout/contenders'
import { FULL_PLAN } from './plan'
import type { StartReply, SteadyReply } from '../lib/fanout/server'

/**
 * Streams per side at most: each side is one server process, which may hold about 20,000 open
 * files here (the hard limit), and its streams are held by client processes of their own.
 */
export const AB_MAX_STREAMS = 19_000

/** tower-sse without (A) and with (B) its metrics option, measured in turns. */
export interface MetricsAB {
  streams: number
  /** Measured broadcasts per side (after warmupPairs unmeasured pairs). */
  pairs: number
  offP50Us: number
  onP50Us: number
  offP90Us: number
  onP90Us: number
  /** onP50Us ÷ offP50Us: the metrics option's cost per broadcast (the target: within ±5%). */
  ratioP50: number
}

const REQUEST_MS = 30_000
const SIDES: readonly ContenderName[] = ['tower-sse', 'tower-sse+metrics']

interface Side { server: IpcClient, holders: IpcClient[], latency: Histogram }

/** One side: its server process and client processes holding `streams` streams on it. */
async function startSide (contender: ContenderName, streams: number): Promise<Side> {
  const server = new IpcClient(spawnServer(false), `A/B ${contender} server`)
  const perProcess = shares(streams, Math.ceil(streams / FULL_PLAN.streamsPerProcess))
  const holders = perProcess.map((_, i) => new IpcClient(spawnClient(), `A/B ${contender} client ${i}`))
  const side = { server, holders, latency: new Histogram() }
  try {
    const { port, fileLimit } = await server.request<StartReply>({ type: 'start', contender, maxClients: streams }, REQUEST_MS)
    requireFiles(server.label, fileLimit, streams + SPARE_FILES)
    await admit(server, holders, FULL_PLAN, port, perProcess, `A/B ${contender} ×${streams}`)
  } catch (error) {
    await stopSide(side)
    throw error
  }
  return side
}

async function stopSide ({ server, holders }: Side): Promise<void> {
  await server.exit()
  await Promise.all(holders.map((holder) => holder.exit()))
}

/**
 * The metrics row as an interleaved A/B: two server processes, tower-sse without and with its
 * metrics option, hold `streams` streams each (their clients in processes of their own), and
 * broadcasts alternate A, B, A, B…, one at a time, so a drift of the machine (other load, GC, CPU
 * frequency) falls on both alike. Each broadcast is timed inside its server as the fan-out rows
 * are: from the call until the event loop comes round again, the turn its frames are written to
 * every socket in.
 */
export async function measureMetricsAB (streams: number, pairs: number, warmupPairs: number): Promise<MetricsAB> {
  if (streams > AB_MAX_STREAMS) throw new RangeError(`metrics A/B: at most ${AB_MAX_STREAMS} streams per side (one server process each), got ${streams}`)
  const sides: Side[] = []
  try {
    for (const contender of SIDES) sides.push(await startSide(contender, streams))
    for (let pair = 0; pair < warmupPairs + pairs; pair++) {
      // Which side goes first alternates too: neither always follows the other's writes.
      for (const side of pair % 2 === 0 ? sides : [...sides].reverse()) {
        const { broadcastUs } = await side.server.request<SteadyReply>({ type: 'steady', events: 1, periodUs: 0 }, REQUEST_MS)
        if (pair >= warmupPairs) side.latency.record(broadcastUs[0])
      }
    }
  } finally {
    await Promise.all(sides.map(stopSide))
  }
  const [a, b] = sides.map((side) => side.latency)
  const round = (n: number): number => Math.round(n)
  return {
    streams,
    pairs,
    offP50Us: round(a.quantile(0.5)),
    onP50Us: round(b.quantile(0.5)),
    offP90Us: round(a.quantile(0.9)),
    onP90Us: round(b.quantile(0.9)),
    ratioP50: Number((b.quantile(0.5) / a.quantile(0.5)).toFixed(3))
  }
}

/** The report's line for one A/B. */
export function metricsABLine (ab: MetricsAB): string {
  const within = Math.abs(ab.ratioP50 - 1) <= 0.05
  return `- **interleaved A/B** (one server process each, broadcasts in turns) at ${ab.streams.toLocaleString('en-US')} streams, ${ab.pairs} broadcasts each: ` +
    `p50 ${ab.offP50Us} µs without metrics, ${ab.onP50Us} µs with (p90 ${ab.offP90Us} / ${ab.onP90Us} µs): ×${ab.ratioP50.toFixed(3)}, ` +
    `${within ? 'within' : '**outside**'} the ±5% target.`
}
