import diagnosticsChannel from 'node:diagnostics_channel'
import autocannon from 'autocannon'
import type { PopulationStart } from './contract'

/** Published by Node for every TCP client socket (net.connect) in this process. */
const CLIENT_SOCKET = 'net.client.socket'

/**
 * The storm as autocannon load: one connection per client, a new TCP connection for every
 * request (`reconnectRate: 1`), a fixed overall rate (default 825 req/s ≈ 49.5K/min). A stream
 * the server never ends holds its connection until the run stops (the timeout outlasts the run).
 *
 * autocannon drops the response it reconnects after from its own counts, so every one with
 * `reconnectRate: 1`: attempts are counted as the TCP connections it opens, and the statuses are
 * left to the server's counts.
 */
export const startAutocannon: PopulationStart = (url, size, counters, settings) => {
  const onSocket = (): void => counters.attempt()
  diagnosticsChannel.subscribe(CLIENT_SOCKET, onSocket)
  let finished: () => void = () => {}
  const done = new Promise<void>((resolve) => { finished = resolve })
  const instance = autocannon({
    url,
    connections: size,
    overallRate: settings.stormRate,
    reconnectRate: 1,
    headers: settings.forwardedFor === undefined ? {} : { 'x-forwarded-for': settings.forwardedFor },
    duration: settings.maxSeconds,
    timeout: settings.maxSeconds
  }, () => {
    diagnosticsChannel.unsubscribe(CLIENT_SOCKET, onSocket)
    finished()
  })
  instance.on('reqError', (error: unknown) => counters.failure(error))
  return {
    // autocannon keeps sending until its next one-second sample; done fires after that.
    close: async () => {
      instance.stop()
      await done
    }
  }
}
