import type { FastifyInstance } from 'fastify'
import { NotRegisteredError } from '../errors'
import type { SseHub } from './hub'

/** The hub tower-sse decorated this context (or one above) with; undefined where none is registered. */
export function hubIn (fastify: FastifyInstance): SseHub | undefined {
  return (fastify as { sse?: SseHub }).sse
}

/**
 * `sseOf(fastify)`: the `fastify.sse` of the tower-sse registered in this context or above, typed
 * where Fastify's types cannot be (a decorator's module augmentation would claim it on every
 * instance, and code meets undefined where the plugin sits in another context); throws
 * TOWER_SSE_NOT_REGISTERED elsewhere.
 */
export function sseOf (fastify: FastifyInstance): SseHub {
  const hub = hubIn(fastify)
  if (hub === undefined) throw new NotRegisteredError()
  return hub
}
