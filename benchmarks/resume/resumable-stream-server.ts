/**
 * Vercel's `resumable-stream` as its README uses it, in a process of its own, driven over IPC: the
 * idempotent API (`resumableStream(id, makeStream, resumeAt)`) behind `GET /answer/<id>?resumeAt=n`,
 * its ioredis flavour (`resumable-stream/ioredis`, the client taken from REDIS_URL), `waitUntil: null`
 * (a long-running server). The route does what the README's does: a null stream is 422 "Stream is
 * already done"; a rejection is what a route handler that throws gets from its framework, a 500.
 * The producer is the same as tower-sse's: the same tokens, one every `everyMs`, holding at `holdAt`.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { createResumableStreamContext } from 'resumable-stream/ioredis'
import type { ResumableStreamContext } from 'resumable-stream/ioredis'
import { serveIpc, type IpcRequest } from '../lib/ipc'
import { ANSWER_PATH } from './plan'
import { tokenData } from './sse-reader'

let server: http.Server | undefined
let context: ResumableStreamContext | undefined
let produced = 0
let holding = 0
const holdWaiters: Array<() => void> = []
/** Why the route answered 500: the context's rejections, in order. */
const errors: string[] = []

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** The answer as a stream of SSE frames (strings, as resumable-stream takes them). */
function makeStream (tokens: number, bytes: number, everyMs: number, holdAt: number): ReadableStream<string> {
  produced++
  let n = 0
  return new ReadableStream<string>({
    async pull (controller) {
      if (n === holdAt) {
        holding++
        for (const resolve of holdWaiters.splice(0)) resolve()
        // Holds here until the process is SIGKILLed.
        await new Promise(() => {})
      }
      if (n >= tokens) {
        controller.close()
        return
      }
      if (everyMs > 0) await sleep(everyMs)
      controller.enqueue(`data: ${tokenData(n, bytes)}\n\n`)
      n++
    }
  })
}

function param (url: URL, name: string, fallback: number): number {
  const value = Number(url.searchParams.get(name) ?? fallback)
  return Number.isSafeInteger(value) && value >= 0 ? value : fallback
}

async function handle (req: http.IncomingMessage, res: http.ServerResponse, streams: ResumableStreamContext): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://127.0.0.1')
  const id = new RegExp(`^${ANSWER_PATH}/([\\w-]+)$`).exec(url.pathname)?.[1]
  if (id === undefined) {
    res.writeHead(404).end()
    return
  }
  const resumeAt = url.searchParams.get('resumeAt')
  let stream: ReadableStream<string> | null
  try {
    stream = await streams.resumableStream(id, () => makeStream(param(url, 'tokens', 100), param(url, 'bytes', 16), param(url, 'everyMs', 0), param(url, 'holdAt', Number.MAX_SAFE_INTEGER)),
      resumeAt === null ? undefined : Number.parseInt(resumeAt, 10))
  } catch (error) {
    errors.push(error instanceof Error ? error.message : String(error))
    res.writeHead(500, { 'content-type': 'text/plain' }).end('Internal Server Error')
    return
  }
  if (stream === null) {
    res.writeHead(422, { 'content-type': 'text/plain' }).end('Stream is already done')
    return
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  const reader = stream.getReader()
  res.on('close', () => { reader.cancel().catch(() => {}) })
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      res.write(value)
    }
    res.end()
  } catch {
    res.destroy()
  }
}

serveIpc('resumable-stream server', {
  start: async (request: IpcRequest) => {
    if (server !== undefined) throw new Error('a server is already running in this process')
    // How the README's ioredis flavour finds its Redis: REDIS_URL (or KV_URL).
    process.env.REDIS_URL = String(request.redis)
    const streams = createResumableStreamContext({ waitUntil: null })
    context = streams
    const listening = http.createServer((req, res) => { void handle(req, res, streams) })
    server = listening
    await new Promise<void>((resolve) => listening.listen(0, '127.0.0.1', resolve))
    return { port: (listening.address() as AddressInfo).port }
  },

  produced: () => produced,

  /** Resolves once a producer holds at its `holdAt` token. */
  held: () => new Promise<number>((resolve) => {
    if (holding > 0) resolve(holding)
    else holdWaiters.push(() => resolve(holding))
  }),

  errors: () => errors,

  /** Whether the context still sees the stream (true), sees it done ("DONE"), or not at all (null). */
  state: async (request: IpcRequest) => await context?.hasExistingStream(String(request.id)),

  close: async () => {
    server?.closeAllConnections()
    await new Promise<void>((resolve) => { if (server === undefined) resolve(); else server.close(() => resolve()) })
    server = undefined
  }
})
