import fastifySse, { type SSEReplyInterface } from '@fastify/sse'
import type { BenchEvent } from '../payload'
import { STREAM_PATH, type StartContender } from './contender'
import { benchFastify, listenOnLoopback } from './fastify-app'

// fastify-sse-v2 declares FastifyReply.sse too (a function); which declaration wins in one
// program depends on file order, so this module names the object @fastify/sse actually attaches.
interface SseReply { sse: SSEReplyInterface }

/**
 * @fastify/sse per its README: an SSE-only route without heartbeat that keeps the stream open
 * (keepAlive) and sends a first message; a broadcast is `reply.sse.send()` on every open stream,
 * not awaited one by one (send awaits drain, which would serialise the clients).
 */
export const startFastifySse: StartContender = async () => {
  const app = benchFastify()
  await app.register(fastifySse)
  const streams = new Set<SSEReplyInterface>()
  app.get(STREAM_PATH, { sse: { kind: 'only', heartbeat: false } }, async (_request, reply) => {
    const stream = (reply as unknown as SseReply).sse
    stream.keepAlive()
    streams.add(stream)
    stream.onClose(() => streams.delete(stream))
    await stream.send({ data: 'connected' })
  })
  const port = await listenOnLoopback(app)
  return {
    port,
    size: () => streams.size,
    broadcast: (event: BenchEvent) => {
      for (const stream of streams) stream.send({ data: event }).catch(() => streams.delete(stream))
    },
    close: () => app.close()
  }
}
