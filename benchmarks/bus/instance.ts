/**
 * One tower-sse instance of the bus benchmark, in its own process, driven over IPC by the runner:
 * a Fastify app with the plugin on the memory bus or on the run's redis-server, its streams opened
 * by the runner, and the two publish loops of loops.ts. Its CPU (process.cpuUsage) is read here,
 * at the ends of each measured window.
 */
import type net from 'node:net'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import Fastify, { type FastifyInstance } from 'fastify'
import towerSse from '../../lib'
import { CLOSE_REASONS } from '../../lib/observe/vocabulary'
import { serveIpc, type IpcRequest } from '../lib/ipc'
import { ClosedLoop, openLoop, type LoopCounts, type OpenLoopResult } from './loops'
import { STREAM_PATH } from './plan'

export interface StartReply { port: number }

/** A reading taken at one end of the capacity window. */
export interface Mark {
  /** performance.now() of this process. */
  atMs: number
  /** This process's CPU so far, user + system, in µs. */
  cpuUs: number
  /** Events fanned out to this instance's streams so far (stats().events: every instance's publishes on a shared bus). */
  events: number
  /** Streams open now, and those closed so far by why (only the reasons that happened). */
  streams: number
  closed: Record<string, number>
  /** The bus's state and delivery lag now (stats().bus). */
  busState: string
  busLagMs: number
  /** Writes to the streams' sockets so far: deliveries ÷ writes is how many events one write carried. */
  streamWrites: number
  /** Unsent bytes on the streams' sockets now (what gates the capacity loop). */
  backlogBytes: number
  /** This instance's capacity loop so far. */
  loop: LoopCounts
}

/** The open loop's figures, and this instance's event-loop delay over it (monitorEventLoopDelay, 10 ms resolution). */
export type OpenLoopReply = OpenLoopResult & { loopDelayP99Ms: number }

let app: FastifyInstance | undefined
let loop: ClosedLoop | null = null
/** The streams' sockets (the runner's connections): their unsent bytes gate the capacity loop. */
const sockets = new Set<net.Socket>()
let streamWrites = 0

function integer (request: IpcRequest, field: string): number {
  const value = request[field]
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new Error(`"${request.type}" needs ${field} as an integer >= 0, got ${String(value)}`)
  }
  return value
}

function positive (request: IpcRequest, field: string): number {
  const value = request[field]
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) throw new Error(`"${request.type}" needs ${field} > 0, got ${String(value)}`)
  return value
}

function running (): FastifyInstance {
  if (app === undefined) throw new Error('no instance started yet (send "start" first)')
  return app
}

function cpuUs (): number {
  const { user, system } = process.cpuUsage()
  return user + system
}

/** Unsent bytes on the streams' sockets (Node's queue: what the kernel has not taken). */
function backlog (): number {
  let bytes = 0
  for (const socket of sockets) bytes += socket.writableLength
  return bytes
}

/** broadcast() of an event of about `bytes` bytes of JSON text; the padding is made once per loop. */
function publisher (target: FastifyInstance, bytes: number): (seq: number) => Promise<unknown> {
  const padding = 'x'.repeat(Math.max(0, bytes - 16))
  return (seq) => target.sse.broadcast({ s: seq, p: padding })
}

function mark (): Mark {
  const target = running()
  const stats = target.sse.stats()
  return {
    atMs: performance.now(),
    cpuUs: cpuUs(),
    events: stats.events,
    streams: stats.current,
    closed: Object.fromEntries(CLOSE_REASONS.filter((reason) => stats[reason] > 0).map((reason) => [reason, stats[reason]])),
    busState: stats.bus.state,
    busLagMs: stats.bus.lagMs,
    streamWrites,
    backlogBytes: backlog(),
    loop: loop === null ? { sent: 0, settled: 0, failed: 0, errors: {}, maxInFlight: 0 } : { ...loop.counts, errors: { ...loop.counts.errors } }
  }
}

serveIpc('bus instance', {
  start: async (request): Promise<StartReply> => {
    if (app !== undefined) throw new Error('an instance is already running in this process')
    app = Fastify({ logger: false, forceCloseConnections: true })
    app.server.on('connection', (socket: net.Socket) => {
      sockets.add(socket)
      // Counted on the socket itself (the plugin writes a stream's turn of frames to it as one write).
      const write = socket.write
      socket.write = function (this: net.Socket, ...args: Parameters<net.Socket['write']>) {
        streamWrites++
        return write.apply(this, args)
      } as net.Socket['write']
      socket.once('close', () => sockets.delete(socket))
    })
    await app.register(towerSse, {
      path: STREAM_PATH,
      maxClients: integer(request, 'maxClients'),
      // The runner's streams read everything; a budget this large is never what drops one.
      maxBufferedBytes: 64 * 1024 * 1024,
      heartbeatMs: 60_000,
      maxAgeMs: 0,
      logIntervalMs: 2 ** 31 - 1,
      // The memory bus when no Redis is given: one process, the baseline.
      ...(typeof request.redis === 'string' ? { redis: { url: request.redis, key: String(request.key) } } : {})
    })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const address = app.server.address()
    if (address === null || typeof address === 'string') throw new Error('expected a TCP address')
    return { port: address.port }
  },

  size: () => running().sse.size,

  mark: () => mark(),

  /** Starts the capacity loop (bounded by maxMs and maxPublishes) and answers at once. */
  'load-start': (request) => {
    if (loop !== null) throw new Error('a capacity loop is already running')
    const streams = Math.max(1, running().sse.size)
    loop = new ClosedLoop(publisher(running(), integer(request, 'bytes')), {
      inFlight: integer(request, 'inFlight'),
      backlog,
      backlogLimit: integer(request, 'backlogBytesPerStream') * streams,
      maxMs: integer(request, 'maxMs'),
      maxPublishes: integer(request, 'maxPublishes'),
      now: () => performance.now()
    })
    loop.start()
    return null
  },

  /** Stops the capacity loop; answers once its publishes in flight settled. */
  'load-stop': async () => {
    const stopping = loop
    if (stopping === null) throw new Error('no capacity loop is running')
    const counts = await stopping.stop(10_000)
    loop = null
    return counts
  },

  /** The latency phase: an open loop at `perSec`, timed from each publish's scheduled time. */
  'open-loop': async (request): Promise<OpenLoopReply> => {
    // How late this instance's event loop ran while it published: a busy loop delays every settle.
    const delay = monitorEventLoopDelay({ resolution: 10 })
    delay.enable()
    try {
      const result = await openLoop(publisher(running(), integer(request, 'bytes')), {
        perSec: positive(request, 'perSec'),
        warmupMs: integer(request, 'warmupMs'),
        measureMs: integer(request, 'measureMs'),
        now: () => performance.now(),
        settleMs: 10_000,
        cpuUs
      })
      return { ...result, loopDelayP99Ms: delay.percentile(99) / 1e6 }
    } finally {
      delay.disable()
    }
  },

  close: async () => {
    await loop?.stop(1000)
    loop = null
    await app?.close()
    app = undefined
  }
})
