import net from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import { Registry } from 'prom-client'
import towerSse from '../../lib'
import { Histogram } from '../lib/histogram'

/**
 * Streams per app at most: both apps and their clients share one process, 4 descriptors per
 * stream pair, under the 20,000 open files a process may hold here.
 */
export const AB_MAX_STREAMS = 4000

/** tower-sse without (A) and with (B) its metrics option, measured in turns in one process. */
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

async function appWithStreams (streams: number, metrics: Registry | undefined): Promise<{ app: FastifyInstance, sockets: net.Socket[] }> {
  const app = Fastify()
  await app.register(towerSse, { maxClients: streams, heartbeatMs: 3_600_000, maxAgeMs: 0, maxAgeJitterMs: 0, ...(metrics === undefined ? {} : { metrics }) })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const port = (app.server.address() as net.AddressInfo).port
  const sockets: net.Socket[] = []
  for (let i = 0; i < streams; i++) {
    const socket = net.connect(port, '127.0.0.1')
    socket.write('GET /api/events HTTP/1.1\r\nHost: localhost\r\n\r\n')
    socket.resume()
    sockets.push(socket)
  }
  const deadline = Date.now() + 60_000
  while (app.sse.size < streams) {
    if (Date.now() > deadline) throw new Error(`metrics A/B: ${app.sse.size} of ${streams} streams open after 60 s`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return { app, sockets }
}

/**
 * The metrics row as an interleaved A/B: both apps hold `streams` streams at once and broadcasts
 * alternate A, B, A, B…, so a drift of the machine (other load, GC, CPU frequency) falls on both
 * alike. Each broadcast is timed from the call until its frames are handed to every socket (the
 * memory bus writes them before broadcast() resolves), with a turn of the event loop between.
 */
export async function measureMetricsAB (streams: number, pairs: number, warmupPairs: number): Promise<MetricsAB> {
  if (streams > AB_MAX_STREAMS) throw new RangeError(`metrics A/B: at most ${AB_MAX_STREAMS} streams per app in one process, got ${streams}`)
  const off = await appWithStreams(streams, undefined)
  const on = await appWithStreams(streams, new Registry())
  const sides = [{ app: off.app, h: new Histogram() }, { app: on.app, h: new Histogram() }]
  try {
    const data = { type: 'notification', title: 'build finished', body: 'x'.repeat(80) }
    for (let pair = 0; pair < warmupPairs + pairs; pair++) {
      // Which side goes first alternates too: neither always follows the other's garbage.
      for (const side of pair % 2 === 0 ? sides : [...sides].reverse()) {
        const started = process.hrtime.bigint()
        await side.app.sse.broadcast(data)
        if (pair >= warmupPairs) side.h.record(Number(process.hrtime.bigint() - started) / 1000)
        await new Promise((resolve) => setImmediate(resolve))
      }
    }
  } finally {
    for (const socket of [...off.sockets, ...on.sockets]) socket.destroy()
    await Promise.all([off.app.close(), on.app.close()])
  }
  const [a, b] = sides.map((side) => side.h)
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
  return `- **interleaved A/B in one process** at ${ab.streams.toLocaleString('en-US')} streams, ${ab.pairs} broadcasts each: ` +
    `p50 ${ab.offP50Us} µs without metrics, ${ab.onP50Us} µs with (p90 ${ab.offP90Us} / ${ab.onP90Us} µs): ×${ab.ratioP50.toFixed(3)}, ` +
    `${within ? 'within' : '**outside**'} the ±5% target.`
}
