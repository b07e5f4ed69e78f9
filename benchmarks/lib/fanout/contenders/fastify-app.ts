import Fastify, { type FastifyInstance } from 'fastify'

/**
 * A Fastify instance the way every Fastify contender starts: no logger (its cost is not what
 * is compared), and close() destroys open streams, which some plugins never end themselves.
 */
export function benchFastify (): FastifyInstance {
  return Fastify({ logger: false, forceCloseConnections: true })
}

/** Listens on an ephemeral loopback port and returns it. */
export async function listenOnLoopback (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('expected a TCP address')
  return address.port
}
