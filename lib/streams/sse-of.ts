import type { FastifyInstance } from 'fastify'
import { NotRegisteredError } from '../errors'
import type { SseHub } from './hub'

/**
 * `sseOf(fastify)`: the `fastify.sse` of the tower-sse registered in this context or above, or
 * TOWER_SSE_NOT_REGISTERED where there is none. `fastify.sse` is typed on every instance (as every
 * Fastify plugin's decorator is), which the types cannot narrow to the contexts that have it: this
 * is the checked way for code that may run in another one.
 */
export function sseOf (fastify: FastifyInstance): SseHub {
  const hub = (fastify as { sse?: SseHub }).sse
  if (hub === undefined) throw new NotRegisteredError()
  return hub
}
