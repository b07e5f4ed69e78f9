import { FastifySSEPlugin, type EventMessage } from 'fastify-sse-v2'
import type { BenchEvent } from '../payload'
import { STREAM_PATH, type StartContender } from './contender'
import { benchFastify, listenOnLoopback } from './fastify-app'

// @fastify/sse declares FastifyReply.sse too (an object); which declaration wins in one program
// depends on file order, so this module names the function fastify-sse-v2 actually attaches.
interface SseReply { sse: (source: EventMessage) => void }

/**
 * fastify-sse-v2 per its README's "sending individual events": the first `reply.sse()` opens
 * the stream, each later call pushes one event; a closed socket leaves the set, as the README
 * suggests. The event's data is serialised once per broadcast (the plugin takes strings).
 */
export const startFastifySseV2: StartContender = async () => {
  const app = benchFastify()
  await app.register(FastifySSEPlugin)
  const streams = new Set<SseReply>()
  app.get(STREAM_PATH, (request, fastifyReply) => {
    const reply = fastifyReply as unknown as SseReply
    reply.sse({ data: 'connected' })
    streams.add(reply)
    request.socket.on('close', () => streams.delete(reply))
  })
  const port = await listenOnLoopback(app)
  return {
    port,
    size: () => streams.size,
    broadcast: (event: BenchEvent) => {
      const data = JSON.stringify(event)
      for (const reply of streams) reply.sse({ data })
    },
    close: () => app.close()
  }
}
