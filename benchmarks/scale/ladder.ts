import { setTimeout as sleep } from 'node:timers/promises'
import { admit, latencyOf, phase, received, requireFiles, shares, spawnClient, spawnServer, SPARE_FILES } from '../lib/fanout/rig'
import type { ContenderName } from '../lib/fanout/contenders'
import { median } from '../lib/fanout/rounds'
import { timeScrapes } from '../lib/fanout/scrape'
import type { FastReply, IdleReply, MemoryReply, StartReply, SteadyReply } from '../lib/fanout/server'
import { IpcClient } from '../lib/ipc'
import type { ScalePlan } from './plan'

const REQUEST_MS = 60_000

/** One contender holding one stream count: a row of scale.json. */
export interface ScaleRow {
  contender: ContenderName
  streams: number
  /** Growth since before the first stream, after full GCs, per stream held. */
  heapKBPerStream: number
  rssKBPerStream: number
  /** The streams added at this step: first connect to the last 200, per stream. */
  admitMs: number
  admitUsPerStream: number
  /** Median server time of one broadcast (to the next event-loop turn), and delivery p99 at the clients. */
  broadcastMs: number
  p99Ms: number
  /** Event-loop delay (perf_hooks monitorEventLoopDelay, 10 ms resolution) with every stream idle and the heartbeat running. */
  loopDelayP99Ms: number
  loopDelayMaxMs: number
  /** Server CPU over the idle window per heartbeat interval: what one heartbeat sweep costs, timers and GC included. */
  heartbeatCpuMs: number
  /** Median stats() call and GET /metrics scrape (null where the contender has none). */
  statsMs: number | null
  metricsMs: number | null
  metricsMaxMs: number | null
  /** Share of the timed broadcasts' deliveries that arrived. */
  deliveredPct: number
}

const round = (value: number, digits = 3): number => Number(value.toFixed(digits))

/**
 * One server process of `contender` growing through `steps` streams (client processes added at
 * each step, each from its own loopback address); at each step: memory, the idle loop, stats(),
 * /metrics, then timed broadcasts. The server is stopped first so it, not the clients, closes.
 */
export async function climbLadder (plan: ScalePlan, contender: ContenderName, steps: number[], log: (line: string) => void): Promise<ScaleRow[]> {
  const top = Math.max(...steps)
  const server = new IpcClient(spawnServer(true), `${contender} server`)
  const holders: IpcClient[] = []
  const rows: ScaleRow[] = []
  try {
    const { port, fileLimit, metricsPath, hasStats } = await server.request<StartReply>({ type: 'start', contender, maxClients: top, heartbeatMs: plan.heartbeatMs }, REQUEST_MS)
    requireFiles(`${contender} server`, fileLimit, top + SPARE_FILES)
    const empty = await server.request<MemoryReply>({ type: 'memory' }, REQUEST_MS)
    let held = 0
    for (const streams of steps) {
      const parts = shares(streams - held, Math.ceil((streams - held) / plan.fanout.streamsPerProcess))
      const added = parts.map((_, i) => new IpcClient(spawnClient(), `client process ${holders.length + i}`))
      holders.push(...added)
      for (const [i, holder] of added.entries()) requireFiles(holder.label, await holder.request<number | null>({ type: 'fileLimit' }, REQUEST_MS), parts[i] + SPARE_FILES)
      const admitMs = await admit(server, added, plan.fanout, port, parts, `${contender} +${streams - held}`, streams)
      held = streams
      await sleep(plan.settleMs)
      const memory = await server.request<MemoryReply>({ type: 'memory' }, REQUEST_MS)
      const idle = await server.request<IdleReply>({ type: 'idle', ms: plan.idleMs }, plan.idleMs + REQUEST_MS)
      const statsMs = hasStats ? await server.request<number>({ type: 'timeStats', times: plan.statsCalls }, REQUEST_MS) : null
      const scrape = metricsPath === null ? null : await timeScrapes(port, metricsPath, plan.scrapes)
      const warmupEvents = Math.ceil(plan.warmupDeliveries / streams)
      await phase(server, holders, plan.fanout, async () =>
        (await server.request<FastReply>({ type: 'fast', maxEvents: warmupEvents, maxMs: plan.fanout.fast.maxMs }, plan.fanout.fast.maxMs + REQUEST_MS)).sent)
      let broadcastUs: number[] = []
      const timed = await phase(server, holders, plan.fanout, async () => {
        const reply = await server.request<SteadyReply>({ type: 'steady', events: plan.broadcasts, periodUs: plan.periodMs * 1000 }, plan.broadcasts * plan.periodMs + REQUEST_MS)
        broadcastUs = reply.broadcastUs
        return reply.sent
      })
      const row: ScaleRow = {
        contender,
        streams,
        heapKBPerStream: round((memory.heapUsed - empty.heapUsed) / streams / 1024, 2),
        rssKBPerStream: round((memory.rss - empty.rss) / streams / 1024, 2),
        admitMs: round(admitMs, 1),
        admitUsPerStream: round(admitMs * 1000 / parts.reduce((sum, n) => sum + n, 0), 1),
        broadcastMs: round(median(broadcastUs) / 1000),
        p99Ms: round(latencyOf(timed.delivered).quantile(0.99) / 1000),
        loopDelayP99Ms: round(idle.loopDelayP99Ms),
        loopDelayMaxMs: round(idle.loopDelayMaxMs),
        heartbeatCpuMs: round(idle.cpuUs / 1000 / (idle.wallUs / 1000 / plan.heartbeatMs)),
        statsMs: statsMs === null ? null : round(statsMs, 4),
        metricsMs: scrape?.medianMs ?? null,
        metricsMaxMs: scrape?.maxMs ?? null,
        deliveredPct: round(received(timed.delivered) / (timed.sent * streams) * 100)
      }
      rows.push(row)
      log(`${contender} ×${streams}: heap ${row.heapKBPerStream} KB/stream, broadcast ${row.broadcastMs} ms, p99 ${row.p99Ms} ms, idle loop p99 ${row.loopDelayP99Ms} ms, /metrics ${row.metricsMs ?? '–'} ms`)
    }
    return rows
  } finally {
    await server.exit()
    await Promise.all(holders.map((holder) => holder.exit()))
  }
}
