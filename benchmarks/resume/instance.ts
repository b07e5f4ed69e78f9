/**
 * One tower-sse instance of the resume benchmark, in its own process, driven over IPC by the
 * runner: a Fastify app whose POST /answer streams a resumable answer (the plugin's `redis` option,
 * or none: the memory log), its producer shaped by the request's headers. Its CPU is read here.
 */
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import towerSse from '../../lib'
import { serveIpc, type IpcRequest } from '../lib/ipc'
import { ANSWER_PATH } from './plan'
import { tokenData } from './sse-reader'

export interface StartReply { port: number }

let app: FastifyInstance | undefined
/** Factory calls on this instance (an answer's producer runs once, wherever it was first asked). */
let produced = 0
/** Producers holding at their `x-hold-at` token, and who waits for them. */
let holding = 0
const holdWaiters: Array<{ count: number, resolve: () => void }> = []

function header (headers: Record<string, string | string[] | undefined>, name: string, fallback: number, max: number): number {
  const value = Number(headers[name] ?? fallback)
  return Number.isSafeInteger(value) && value >= 0 ? Math.min(value, max) : fallback
}

function held (): void {
  holding++
  for (const waiter of holdWaiters.splice(0)) {
    if (holding >= waiter.count) waiter.resolve()
    else holdWaiters.push(waiter)
  }
}

const untilAborted = (signal: AbortSignal): Promise<void> => new Promise((resolve) => {
  if (signal.aborted) resolve()
  else signal.addEventListener('abort', () => resolve(), { once: true })
})
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * `tokens` tokens of `bytes` bytes, one every `everyMs` (0: as fast as the log takes them); at
 * `holdAt` it stops producing and waits (for its SIGKILL) until aborted.
 */
async function * answer (tokens: number, bytes: number, everyMs: number, holdAt: number, signal: AbortSignal): AsyncGenerator<{ data: string }> {
  for (let n = 0; n < tokens && !signal.aborted; n++) {
    if (n === holdAt) {
      held()
      await untilAborted(signal)
      return
    }
    if (everyMs > 0) await sleep(everyMs)
    yield { data: tokenData(n, bytes) }
  }
}

function integer (request: IpcRequest, field: string): number {
  const value = request[field]
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new Error(`"${request.type}" needs ${field} as an integer >= 0, got ${String(value)}`)
  }
  return value
}

serveIpc('resume instance', {
  /** Listens on a free port; `redis` (a URL) puts the answers' logs in Redis under `key`, else in this process. */
  start: async (request): Promise<StartReply> => {
    if (app !== undefined) throw new Error('an instance is already running in this process')
    const redis = typeof request.redis === 'string' ? request.redis : undefined
    app = Fastify({ logger: false, forceCloseConnections: true })
    await app.register(towerSse, {
      path: false,
      maxClients: 20_000,
      heartbeatMs: 60_000,
      maxAgeMs: 0,
      logIntervalMs: 2 ** 31 - 1,
      keyFn: (req) => String(req.headers['x-user'] ?? 'anon'),
      ...(redis === undefined ? {} : { redis: { url: redis, key: String(request.key) } })
    })
    app.post(ANSWER_PATH, { eventStream: true }, (req, reply) => {
      const tokens = header(req.headers, 'x-tokens', 100, 1_000_000)
      const bytes = header(req.headers, 'x-bytes', 16, 64 * 1024)
      const everyMs = header(req.headers, 'x-every-ms', 0, 60_000)
      const holdAt = header(req.headers, 'x-hold-at', Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
      return reply.eventStream.subscribe({
        resumable: { ttlMs: integer(request, 'ttlMs') },
        stream: ({ signal }) => {
          produced++
          return answer(tokens, bytes, everyMs, holdAt, signal)
        }
      })
    })
    await app.listen({ host: '127.0.0.1', port: 0 })
    return { port: (app.server.address() as AddressInfo).port }
  },

  /** This process's CPU time so far (user + system), in µs. */
  cpu: () => {
    const { user, system } = process.cpuUsage()
    return user + system
  },

  produced: () => produced,

  /** Resolves once `count` producers (since the start) hold at their `x-hold-at` token. */
  held: (request) => new Promise<number>((resolve) => {
    const count = integer(request, 'count')
    if (holding >= count) resolve(holding)
    else holdWaiters.push({ count, resolve: () => resolve(holding) })
  }),

  close: async () => {
    await app?.close()
    app = undefined
  }
})
