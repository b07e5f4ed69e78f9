import { setTimeout as sleep } from 'node:timers/promises'
import { IpcClient } from '../lib/ipc'
import type { ContenderName } from '../lib/fanout/contenders'
import { admit, latencyOf, phase, received, REQUEST_MS, requireFiles, shares, spawnClient, spawnServer, SPARE_FILES, type Phase } from '../lib/fanout/rig'
import { median } from '../lib/fanout/rounds'
import { timeScrapes } from '../lib/fanout/scrape'
import type { BurstReply, FastReply, MemoryReply, StartReply, SteadyReply } from '../lib/fanout/server'
import { steadyRate, type FanoutPlan } from './plan'

/** What one contender did with one stream count: the figures of one results row. */
export interface CaseResult {
  contender: ContenderName
  clients: number
  clientProcesses: number
  /**
   * Streams are admitted in two halves. The rate of the second, on a server the first has warmed
   * (a storm meets a server that has run): its time, first connect to last 200, and the rate it
   * implies. The first, cold half's rate beside it.
   */
  connectMs: number
  connectsPerSec: number
  coldConnectsPerSec: number
  /** Events per second of the steady phase (the same deliveries per second at every stream count). */
  steadyRatePerSec: number
  /** Median server time of one broadcast at the steady rate (stamp to next event-loop turn). */
  broadcastMs: number
  /** Delivery latency at the steady rate: stamp in the payload to its arrival at the client. */
  p50Ms: number
  p99Ms: number
  /** Server CPU (user + system, % of one core) over the steady phase. */
  steadyCpuPct: number
  /** CPU per delivery (one event to one stream) in the steady phase: server, and all client processes. */
  serverCpuUsPerDelivery: number
  clientCpuUsPerDelivery: number
  /** Back to back: events per second that reached every stream. */
  eventsPerSec: number
  fastEvents: number
  fastP50Ms: number
  fastP99Ms: number
  /** Server CPU time per event in the back-to-back phase, delivery included. */
  fastCpuMsPerEvent: number
  /**
   * Server growth per idle stream after GC over the second half: what one more stream costs, not
   * the path's first compilation and the heap's first growth (one-time costs the first half pays).
   */
  rssPerClientKB: number
  heapPerClientKB: number
  /** Share of the expected deliveries (events × streams, both phases) that arrived. */
  deliveredPct: number
  /** GET /metrics with every stream open, for contenders that export metrics (else null). */
  scrapeMs: number | null
  scrapeMaxMs: number | null
}

/** One burst size for one contender and stream count: a burst row of the results. */
export interface BurstResult {
  contender: ContenderName
  clients: number
  /** Events per burst. */
  burst: number
  /** Events sent in the phase (whole bursts). */
  events: number
  /** Deliveries (events × streams) per second, first send to last arrival. */
  deliveriesPerSec: number
  /** Latency of every delivery of the phase: stamp in the payload to arrival at the client. */
  p50Ms: number
  p99Ms: number
  /** Server CPU per delivery over the phase. */
  serverCpuUsPerDelivery: number
  /** Share of the phase's deliveries that arrived. */
  deliveredPct: number
}

/** Everything measured in one case: the steady/back-to-back row and one row per burst size. */
export interface MeasuredCase {
  steady: CaseResult
  bursts: BurstResult[]
}

const BURST_REPLY_MS = 180_000

const round = (value: number, digits = 2): number => Number(value.toFixed(digits))

function burstResult (contender: ContenderName, clients: number, size: number, firstSendUs: number, measured: Phase): BurstResult {
  const latency = latencyOf(measured.delivered)
  const deliveries = received(measured.delivered)
  const lastArrivalUs = Math.max(...measured.delivered.map((r) => r.lastArrivalUs))
  const seconds = (lastArrivalUs - firstSendUs) / 1e6
  return {
    contender,
    clients,
    burst: size,
    events: measured.sent,
    deliveriesPerSec: seconds > 0 ? Math.round(deliveries / seconds) : 0,
    p50Ms: round(latency.quantile(0.5) / 1000, 3),
    p99Ms: round(latency.quantile(0.99) / 1000, 3),
    serverCpuUsPerDelivery: round(measured.cpuUs / Math.max(1, deliveries)),
    deliveredPct: round(deliveries / (measured.sent * clients) * 100, 3)
  }
}

/**
 * One contender with `clients` streams, in fresh processes: start the server, admit the
 * streams, read idle memory, broadcast at a steady rate, then back to back, then in bursts of
 * each size; the server is stopped first so it, not the clients, closes the sockets. A profile,
 * if asked for, covers the bursts of the largest size.
 */
export async function measureCase (
  plan: FanoutPlan, contender: ContenderName, clients: number,
  log: (line: string) => void, profileFile: string | null = null
): Promise<MeasuredCase> {
  const server = new IpcClient(
    spawnServer(true), `${contender} server`
  )
  const perProcess = shares(clients, Math.ceil(clients / plan.streamsPerProcess))
  const holders = perProcess.map((_, i) => new IpcClient(
    spawnClient(), `client process ${i}`
  ))
  try {
    const { port, fileLimit, metricsPath } = await server.request<StartReply>({ type: 'start', contender, maxClients: clients }, REQUEST_MS)
    requireFiles(`${contender} server`, fileLimit, clients + SPARE_FILES)
    for (const [i, holder] of holders.entries()) {
      requireFiles(holder.label, await holder.request<number | null>({ type: 'fileLimit' }, REQUEST_MS), perProcess[i] + SPARE_FILES)
    }
    const firstHalf = perProcess.map((n) => Math.floor(n / 2))
    const secondHalf = perProcess.map((n, i) => n - firstHalf[i])
    const [coldStreams, warmStreams] = [firstHalf, secondHalf].map((part) => part.reduce((sum, n) => sum + n, 0))
    const coldMs = await admit(server, holders, plan, port, firstHalf, `${contender} ×${clients} (first half)`)
    await sleep(plan.settleMs)
    const half = await server.request<MemoryReply>({ type: 'memory' }, REQUEST_MS)
    const connectMs = await admit(server, holders, plan, port, secondHalf, `${contender} ×${clients} (second half)`, clients)
    log(`${contender} ×${clients}: admitted ${coldStreams} in ${coldMs.toFixed(0)} ms, then ${warmStreams} in ${connectMs.toFixed(0)} ms`)
    await sleep(plan.settleMs)
    const loaded = await server.request<MemoryReply>({ type: 'memory' }, REQUEST_MS)
    const scrape = metricsPath === null ? null : await timeScrapes(port, metricsPath)
    if (scrape !== null) log(`${contender} ×${clients}: GET ${metricsPath} in ${scrape.medianMs} ms (max ${scrape.maxMs} ms)`)

    const warmupEvents = Math.ceil(plan.warmupDeliveries / clients)
    await phase(server, holders, plan, async () =>
      (await server.request<FastReply>({ type: 'fast', maxEvents: warmupEvents, maxMs: plan.fast.maxMs }, plan.fast.maxMs + REQUEST_MS)).sent)

    let broadcastUs: number[] = []
    const steady = await phase(server, holders, plan, async () => {
      const periodUs = Math.round(1e6 / steadyRate(plan, clients))
      const reply = await server.request<SteadyReply>({ type: 'steady', events: plan.steady.events, periodUs },
        plan.steady.events * periodUs / 1000 + REQUEST_MS)
      broadcastUs = reply.broadcastUs
      return reply.sent
    })
    const steadyLatency = latencyOf(steady.delivered)
    log(`${contender} ×${clients}: steady p99 ${(steadyLatency.quantile(0.99) / 1000).toFixed(2)} ms`)

    let firstSendUs = 0
    const fast = await phase(server, holders, plan, async () => {
      const reply = await server.request<FastReply>({ type: 'fast', ...plan.fast }, plan.fast.maxMs + REQUEST_MS)
      firstSendUs = reply.firstSendUs
      return reply.sent
    })
    const fastLatency = latencyOf(fast.delivered)
    const lastArrivalUs = Math.max(...fast.delivered.map((r) => r.lastArrivalUs))
    const fastSeconds = (lastArrivalUs - firstSendUs) / 1e6
    const eventsPerSec = fastSeconds > 0 ? received(fast.delivered) / clients / fastSeconds : 0
    log(`${contender} ×${clients}: ${fast.sent} back-to-back events at ${eventsPerSec.toFixed(0)}/s`)

    const bursts: BurstResult[] = []
    const largest = Math.max(...plan.burst.sizes)
    for (const size of plan.burst.sizes) {
      const profiled = profileFile !== null && size === largest
      if (profiled) await server.request({ type: 'profileStart' }, REQUEST_MS)
      let burstFirstSendUs = 0
      const phaseResult = await phase(server, holders, plan, async () => {
        const reply = await server.request<BurstReply>(
          { type: 'burst', size, from: plan.burst.from, maxEvents: plan.burst.maxEvents, maxMs: plan.burst.maxMs },
          // At least one whole burst is sent, however long it takes: a slow peer's burst of 50 at
          // 10,000 streams is 500,000 writes (about 40 s for fastify-sse-v2 on a busy host).
          plan.burst.maxMs + BURST_REPLY_MS
        )
        burstFirstSendUs = reply.firstSendUs
        return reply.sent
      })
      if (profiled) await server.request({ type: 'profileStop', file: profileFile }, REQUEST_MS)
      bursts.push(burstResult(contender, clients, size, burstFirstSendUs, phaseResult))
      log(`${contender} ×${clients}: bursts of ${size}: ${bursts[bursts.length - 1].deliveriesPerSec.toFixed(0)} deliveries/s`)
    }

    const expected = (steady.sent + fast.sent) * clients
    const steadyDeliveries = Math.max(1, received(steady.delivered))
    const steadyRow: CaseResult = {
      contender,
      clients,
      clientProcesses: holders.length,
      connectMs: round(connectMs, 1),
      connectsPerSec: Math.round(warmStreams / (connectMs / 1000)),
      coldConnectsPerSec: Math.round(coldStreams / (coldMs / 1000)),
      steadyRatePerSec: round(steadyRate(plan, clients), 3),
      broadcastMs: round(median(broadcastUs) / 1000, 3),
      p50Ms: round(steadyLatency.quantile(0.5) / 1000, 3),
      p99Ms: round(steadyLatency.quantile(0.99) / 1000, 3),
      steadyCpuPct: round(steady.cpuUs / steady.wallUs * 100, 1),
      serverCpuUsPerDelivery: round(steady.cpuUs / steadyDeliveries),
      clientCpuUsPerDelivery: round(steady.delivered.reduce((sum, r) => sum + r.cpuUs, 0) / steadyDeliveries),
      eventsPerSec: round(eventsPerSec, 1),
      fastEvents: fast.sent,
      fastP50Ms: round(fastLatency.quantile(0.5) / 1000, 3),
      fastP99Ms: round(fastLatency.quantile(0.99) / 1000, 3),
      fastCpuMsPerEvent: round(fast.cpuUs / 1000 / Math.max(1, fast.sent), 3),
      rssPerClientKB: round((loaded.rss - half.rss) / warmStreams / 1024),
      heapPerClientKB: round((loaded.heapUsed - half.heapUsed) / warmStreams / 1024),
      deliveredPct: round((received(steady.delivered) + received(fast.delivered)) / expected * 100, 3),
      scrapeMs: scrape?.medianMs ?? null,
      scrapeMaxMs: scrape?.maxMs ?? null
    }
    return { steady: steadyRow, bursts }
  } finally {
    await server.exit()
    await Promise.all(holders.map((holder) => holder.exit()))
  }
}
