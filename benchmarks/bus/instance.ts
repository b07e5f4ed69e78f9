/**
 * One tower-sse instance of the bus benchmark, in its own process, driven over IPC by the runner:
 * a Fastify app with the plugin on the run's redis-server, its streams opened by the runner, and a
 * closed publish loop timed here (broadcast() called → settled).
 */
import Fastify, { type FastifyInstance } from 'fastify'
import towerSse from '../../lib'
import { Histogram } from '../lib/histogram'
import { serveIpc, type IpcRequest } from '../lib/ipc'
import { STREAM_PATH } from './plan'

export interface StartReply { port: number }
export interface PublishReply {
  sent: number
  failed: number
  /** Why publishes failed, by error code, when any did. */
  errors: Record<string, number>
  /** Publish latency in µs: broadcast() called → settled (Redis ran it and this instance's reader delivered it). */
  latencyUs: ReturnType<Histogram['toJSON']>
  elapsedMs: number
}

let app: FastifyInstance | undefined

function integer (request: IpcRequest, field: string): number {
  const value = request[field]
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new Error(`"${request.type}" needs ${field} as an integer >= 0, got ${String(value)}`)
  }
  return value
}

function running (): FastifyInstance {
  if (app === undefined) throw new Error('no instance started yet (send "start" first)')
  return app
}

/** An event of about `bytes` bytes of data (its JSON text). */
function eventOf (seq: number, bytes: number): { s: number, p: string } {
  return { s: seq, p: 'x'.repeat(Math.max(0, bytes - 16)) }
}

/**
 * `inFlight` publishes kept going for `ms`: each one that settles starts the next, so the
 * publishes that settle in one turn are sent again in one turn (what a batch can join).
 */
async function publishLoop (target: FastifyInstance, inFlight: number, ms: number, bytes: number, record: Histogram | null): Promise<PublishReply> {
  const started = performance.now()
  const deadline = started + ms
  let sent = 0
  let failed = 0
  const errors: Record<string, number> = {}
  const one = async (): Promise<void> => {
    while (performance.now() < deadline) {
      const at = performance.now()
      sent++
      try {
        await target.sse.broadcast(eventOf(sent, bytes))
        record?.record((performance.now() - at) * 1000)
      } catch (error) {
        failed++
        const code = (error as { code?: string }).code ?? (error as Error).message
        errors[code] = (errors[code] ?? 0) + 1
      }
    }
  }
  await Promise.all(Array.from({ length: inFlight }, one))
  return { sent, failed, errors, latencyUs: (record ?? new Histogram()).toJSON(), elapsedMs: performance.now() - started }
}

serveIpc('bus instance', {
  start: async (request): Promise<StartReply> => {
    if (app !== undefined) throw new Error('an instance is already running in this process')
    const redis = String(request.redis)
    app = Fastify({ logger: false, forceCloseConnections: true })
    await app.register(towerSse, {
      path: STREAM_PATH,
      maxClients: integer(request, 'maxClients'),
      // The loop keeps inFlight publishes per instance; the runner's streams read everything.
      maxBufferedBytes: 64 * 1024 * 1024,
      heartbeatMs: 60_000,
      maxAgeMs: 0,
      logIntervalMs: 2 ** 31 - 1,
      redis: { url: redis, key: String(request.key) }
    })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const address = app.server.address()
    if (address === null || typeof address === 'string') throw new Error('expected a TCP address')
    return { port: address.port }
  },

  size: () => running().sse.size,

  /** Publishes for `ms` with `inFlight` in flight; timed unless `warmup`. */
  publish: (request): Promise<PublishReply> =>
    publishLoop(running(), integer(request, 'inFlight'), integer(request, 'ms'), integer(request, 'bytes'), request.warmup === true ? null : new Histogram()),

  close: async () => {
    await app?.close()
    app = undefined
  }
})
