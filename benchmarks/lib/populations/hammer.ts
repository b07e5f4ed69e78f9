import { eachClient, type PopulationStart } from './contract'
import { reconnectingRequest } from './reconnecting-request'

/**
 * The population behind 49K connects/min: reconnects a fixed short delay after any end, refusal
 * or error, on a new TCP connection each time, ignoring Retry-After and `retry:`. It asks for
 * keep-alive as browsers do, so after a keep-alive response the client closes the socket first.
 */
export const startHammers: PopulationStart = (url, size, counters, settings) => eachClient(size, () =>
  reconnectingRequest(url, counters, {
    request: { agent: false, headers: { connection: 'keep-alive' } },
    nextDelayMs: () => settings.hammerDelayMs
  })
)
