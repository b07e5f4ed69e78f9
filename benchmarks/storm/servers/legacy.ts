import { randomUUID } from 'node:crypto'
import { connectedEvent, EVENTS_PATH, type ServerSetup } from './contract'
import { openHandRolledStream } from './hand-rolled-stream'

/** The legacy cap: the 51st client evicts the oldest. */
export const LEGACY_MAX_CLIENTS = 50
const MAX_AGE_MS = 5 * 60_000

interface LegacyClient {
  id: string
  end: () => void
}

/**
 * Tower's events route before the fix, reproduced for the storm benchmark only: at the cap it
 * `shift()`s the oldest client and ends its stream (which reconnects and evicts the next one),
 * a fixed 5-minute max age, and an INFO line for every connect and every disconnect.
 */
export const setupLegacy: ServerSetup = async (app) => {
  const clients: LegacyClient[] = []
  let admitted = 0
  let evicted = 0
  let expired = 0
  app.get(EVENTS_PATH, (request, reply) => {
    if (clients.length >= LEGACY_MAX_CLIENTS) {
      const oldest = clients.shift() as LegacyClient
      evicted++
      oldest.end()
    }
    reply.hijack()
    const res = reply.raw
    const client: LegacyClient = { id: randomUUID(), end: () => res.end() }
    openHandRolledStream(res, `data: ${connectedEvent(client.id)}\n\n`, {
      maxAgeMs: MAX_AGE_MS,
      onExpire: () => { expired++ },
      onClose: () => {
        const index = clients.indexOf(client)
        if (index !== -1) clients.splice(index, 1)
        request.log.info({ clientId: client.id, clients: clients.length }, 'SSE client disconnected')
      }
    })
    clients.push(client)
    admitted++
    request.log.info({ clientId: client.id, clients: clients.length }, 'SSE client connected')
  })
  return () => ({ admitted, rejected: 0, evicted, expired, open: clients.length })
}
