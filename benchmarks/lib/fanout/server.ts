/**
 * The server process of one fanout case: one contender on loopback, driven over IPC by the
 * runner. Broadcast loops, CPU and memory readings all happen here, inside the process
 * measured, so the client processes' own cost never enters them.
 */
import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector/promises'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises'
import { serveIpc, type IpcRequest } from '../ipc'
import { openFileLimit } from '../spawn-sibling'
import { CONTENDERS, isContenderName } from './contenders'
import type { ContenderServer } from './contenders/contender'
import { benchEvent, nowUs } from './payload'
import { BURST_SOURCES, type BurstSource } from './rig'
import { median } from './rounds'

export interface StartReply { port: number, fileLimit: number | null, metricsPath: string | null, hasStats: boolean }
export interface IdleReply { loopDelayP99Ms: number, loopDelayMaxMs: number, cpuUs: number, wallUs: number }
export interface MemoryReply { rss: number, heapUsed: number }
export interface CpuReading { cpuUs: number, atUs: number }
export interface SteadyReply { sent: number, broadcastUs: number[] }
export interface FastReply { sent: number, firstSendUs: number, lastSendUs: number }
export type BurstReply = FastReply

let server: ContenderServer | undefined
let profiler: Session | undefined

function running (): ContenderServer {
  if (server === undefined) throw new Error('no contender started yet (send "start" first)')
  return server
}

function count (request: IpcRequest, field: string): number {
  const value = request[field]
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new Error(`"${request.type}" needs ${field} as an integer >= 0, got ${String(value)}`)
  }
  return value
}

/**
 * One broadcast, timed from the event's stamp until the event loop comes round again: plugins
 * that write from promises or stream pipes (rather than inside the call) are timed to the end
 * of their writes too.
 */
async function timedBroadcast (target: ContenderServer, seq: number): Promise<number> {
  const event = benchEvent(seq)
  target.broadcast(event)
  await nextTurn()
  return nowUs() - event.t
}

/**
 * One burst of `size` broadcasts. From 'callbacks': each from its own setImmediate callback, all
 * in one check phase — the shape of `size` notify requests parsed in one poll phase, each handled
 * in its own callback with process.nextTick and microtasks run in between. From 'loop': one
 * synchronous loop. Resolves in the turn after the burst, once every write of it was handed on.
 */
async function burst (target: ContenderServer, size: number, from: BurstSource, firstSeq: number): Promise<void> {
  for (let i = 0; i < size; i++) {
    if (from === 'loop') target.broadcast(benchEvent(firstSeq + i))
    else setImmediate(() => target.broadcast(benchEvent(firstSeq + i)))
  }
  await nextTurn() // behind the burst's own callbacks
  await nextTurn() // and behind whatever they scheduled for the end of their turn
}

serveIpc('fanout server', {
  start: async (request): Promise<StartReply> => {
    const name = String(request.contender)
    if (!isContenderName(name)) throw new Error(`unknown contender "${name}"`)
    if (server !== undefined) throw new Error('a contender is already running in this process')
    const heartbeatMs = request.heartbeatMs === undefined ? undefined : count(request, 'heartbeatMs')
    server = await CONTENDERS[name]({ maxClients: count(request, 'maxClients'), heartbeatMs })
    return { port: server.port, fileLimit: openFileLimit(), metricsPath: server.metricsPath ?? null, hasStats: server.stats !== undefined }
  },

  size: () => running().size(),

  /** Heap and RSS after full collections: what stays allocated, not garbage awaiting GC. */
  memory: (): MemoryReply => {
    const gc = globalThis.gc
    if (gc === undefined) throw new Error('the server must run with --expose-gc to measure memory')
    gc()
    gc()
    const { rss, heapUsed } = process.memoryUsage()
    return { rss, heapUsed }
  },

  cpu: (): CpuReading => {
    const { user, system } = process.cpuUsage()
    return { cpuUs: user + system, atUs: nowUs() }
  },

  /**
   * `ms` of doing nothing but the contender's own timers (its heartbeat): the event loop's delay
   * (perf_hooks, 10 ms resolution) and the CPU those timers took, measured in the process itself.
   */
  idle: async (request): Promise<IdleReply> => {
    running()
    const histogram = monitorEventLoopDelay({ resolution: 10 })
    const cpu = process.cpuUsage()
    const startUs = nowUs()
    histogram.enable()
    await sleep(count(request, 'ms'))
    histogram.disable()
    const { user, system } = process.cpuUsage(cpu)
    return { loopDelayP99Ms: histogram.percentile(99) / 1e6, loopDelayMaxMs: histogram.max / 1e6, cpuUs: user + system, wallUs: nowUs() - startUs }
  },

  /** `times` calls of the contender's stats(), one per turn: the median call in ms. */
  timeStats: async (request): Promise<number> => {
    const stats = running().stats
    if (stats === undefined) throw new Error('this contender keeps no stats()')
    const times: number[] = []
    for (let i = count(request, 'times'); i > 0; i--) {
      const started = performance.now()
      stats()
      times.push(performance.now() - started)
      await nextTurn()
    }
    return median(times)
  },

  /** `events` broadcasts `periodUs` apart, each timed; the schedule does not drift. */
  steady: async (request): Promise<SteadyReply> => {
    const target = running()
    const events = count(request, 'events')
    const periodUs = count(request, 'periodUs')
    const startUs = nowUs()
    const broadcastUs: number[] = []
    for (let seq = 0; seq < events; seq++) {
      const waitMs = (startUs + seq * periodUs - nowUs()) / 1000
      if (waitMs > 0) await sleep(waitMs)
      broadcastUs.push(await timedBroadcast(target, seq))
    }
    return { sent: events, broadcastUs }
  },

  /** Back to back, yielding one event-loop turn between broadcasts so sockets can flush. */
  fast: async (request): Promise<FastReply> => {
    const target = running()
    const maxEvents = count(request, 'maxEvents')
    const deadlineUs = nowUs() + count(request, 'maxMs') * 1000
    const firstSendUs = nowUs()
    let sent = 0
    while (sent < maxEvents && nowUs() < deadlineUs) await timedBroadcast(target, sent++)
    return { sent, firstSendUs, lastSendUs: nowUs() }
  },

  /** Whole bursts of `size`, back to back, until `maxEvents` (at least one burst) or `maxMs`. */
  burst: async (request): Promise<BurstReply> => {
    const target = running()
    const size = count(request, 'size')
    const maxEvents = count(request, 'maxEvents')
    const from = request.from as BurstSource
    if (size < 1) throw new Error('"burst" needs size >= 1')
    if (!BURST_SOURCES.includes(from)) throw new Error(`"burst" needs from as one of ${BURST_SOURCES.join(', ')}, got ${String(from)}`)
    const deadlineUs = nowUs() + count(request, 'maxMs') * 1000
    const firstSendUs = nowUs()
    let sent = 0
    do {
      await burst(target, size, from, sent)
      sent += size
    } while (sent + size <= maxEvents && nowUs() < deadlineUs)
    return { sent, firstSendUs, lastSendUs: nowUs() }
  },

  profileStart: async () => {
    profiler = new Session()
    profiler.connect()
    await profiler.post('Profiler.enable')
    await profiler.post('Profiler.setSamplingInterval', { interval: 100 })
    await profiler.post('Profiler.start')
  },

  /** Stops the profiler and writes the .cpuprofile to `file`. */
  profileStop: async (request) => {
    if (profiler === undefined) throw new Error('profileStop without profileStart')
    const { profile } = await profiler.post('Profiler.stop')
    profiler.disconnect()
    profiler = undefined
    writeFileSync(String(request.file), JSON.stringify(profile))
  },

  close: async () => {
    await server?.close()
    server = undefined
  }
})
