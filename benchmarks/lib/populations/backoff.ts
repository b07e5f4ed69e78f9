import { eachClient, type PopulationStart } from './contract'
import { reconnectingRequest } from './reconnecting-request'

const BASE_MS = 1000
const CAP_MS = 30_000

/**
 * The editor extension: Node's http with its default (keep-alive) agent. After any end, refusal
 * or error it waits 1 s·2^n (n failures since the last 200, capped at 30 s); a 200 resets n,
 * so a client whose stream is ended right away comes back every second.
 */
export const startBackoffClients: PopulationStart = (url, size, counters) => eachClient(size, () => {
  let failures = 0
  return reconnectingRequest(url, counters, {
    request: {},
    onStatus: (status) => {
      if (status === 200) failures = 0
    },
    nextDelayMs: () => Math.min(CAP_MS, BASE_MS * 2 ** failures++)
  })
})
