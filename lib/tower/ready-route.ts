import type { FastifyPluginCallback } from 'fastify'
import { sseOf } from '..'
import { TOWER_ROUTES } from './routes'

/**
 * GET /api/ready, for load balancers: 200 `{ ready: true, bus }` while this instance can publish
 * and proves it receives what the bus carries, 503 `{ ready: false, bus }` while it cannot (the
 * bus's state is 'down': Redis unreachable, stalled, or this instance deaf to it), so new streams
 * go to a healthy instance. Out of memory ('oom') stays ready: the Redis refuses every instance's
 * writes alike, and streams here still receive. The memory bus is always up.
 */
export const readyRoute: FastifyPluginCallback = (fastify, _options, done) => {
  fastify.get(TOWER_ROUTES.ready, async (_request, reply) => {
    const bus = sseOf(fastify).stats().bus.state
    const ready = bus !== 'down'
    void reply.header('cache-control', 'no-store').code(ready ? 200 : 503)
    return { ready, bus }
  })
  done()
}
