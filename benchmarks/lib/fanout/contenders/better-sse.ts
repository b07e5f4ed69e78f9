import type * as BetterSse from 'better-sse' with { 'resolution-mode': 'import' }
import type { BenchEvent } from '../payload'
import { STREAM_PATH, type StartContender } from './contender'
import { benchFastify, listenOnLoopback } from './fastify-app'

// better-sse's exports map lists its ESM types before its CommonJS entry, so TypeScript takes
// the package for ESM-only; require() loads the CommonJS build that the same map names.
const { createChannel, createSession } = require('better-sse') as typeof BetterSse

/**
 * better-sse per its Fastify recipe (createSession on the raw request and response) with every
 * session registered on one channel; a broadcast is `channel.broadcast()`. Keep-alive is off
 * (keepAlive: null), as heartbeats are for every contender.
 */
export const startBetterSse: StartContender = async () => {
  const app = benchFastify()
  const channel = createChannel()
  app.get(STREAM_PATH, async (request, reply) => {
    const session = await createSession(request.raw, reply.raw, { keepAlive: null })
    channel.register(session)
  })
  const port = await listenOnLoopback(app)
  return {
    port,
    size: () => channel.sessionCount,
    broadcast: (event: BenchEvent) => { channel.broadcast(event) },
    close: () => app.close()
  }
}
