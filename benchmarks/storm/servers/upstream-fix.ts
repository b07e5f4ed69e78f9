import { randomUUID } from 'node:crypto'
import { connectedEvent, EVENTS_PATH, type ServerSetup } from './contract'
import { openHandRolledStream } from './hand-rolled-stream'

/** The upstream fix's cap: the 201st client is refused. */
export const UPSTREAM_MAX_CLIENTS = 200
const MAX_AGE_MS = 5 * 60_000
const MAX_AGE_JITTER_MS = 60_000

/**
 * The fix as upstream shipped it, reproduced for the storm benchmark only: at the cap a 503 with
 * `Retry-After: 5` and a text/plain body before any stream header, `retry: 5000`, 5 min ± 60 s
 * max age, no per-connection logs. The refusal keeps the connection alive (Fastify's default).
 */
export const setupUpstreamFix: ServerSetup = async (app) => {
  const clients = new Set<string>()
  let admitted = 0
  let rejected = 0
  let expired = 0
  app.get(EVENTS_PATH, (_request, reply) => {
    if (clients.size >= UPSTREAM_MAX_CLIENTS) {
      rejected++
      void reply.code(503).header('retry-after', '5').type('text/plain').send('Too many event streams, retry later')
      return
    }
    reply.hijack()
    const id = randomUUID()
    openHandRolledStream(reply.raw, `retry: 5000\n\ndata: ${connectedEvent(id)}\n\n`, {
      maxAgeMs: MAX_AGE_MS + Math.round((Math.random() * 2 - 1) * MAX_AGE_JITTER_MS),
      onExpire: () => { expired++ },
      onClose: () => { clients.delete(id) }
    })
    clients.add(id)
    admitted++
  })
  return () => ({ admitted, rejected, evicted: 0, expired, open: clients.size })
}
