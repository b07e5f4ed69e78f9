import http from 'node:http'
import type { ClientCounters } from './counters'

export interface ReconnectPolicy {
  /** Options of every request (agent, headers). */
  request: http.RequestOptions
  /** Sees each answer's status as it arrives. */
  onStatus?: (status: number) => void
  /** The wait before the next attempt, asked once after each end, refusal or error. */
  nextDelayMs: () => number
}

/**
 * One hand-written client: GET `url`, read the answer to its end (a stream until the server ends
 * it), wait as the policy says, again, until the returned stop function is called.
 */
export function reconnectingRequest (url: string, counters: ClientCounters, policy: ReconnectPolicy): () => void {
  let request: http.ClientRequest | undefined
  let timer: NodeJS.Timeout | undefined
  let stopped = false
  const connect = (): void => {
    let settled = false
    const again = (): void => {
      if (settled || stopped) return
      settled = true
      timer = setTimeout(connect, policy.nextDelayMs())
    }
    counters.attempt()
    request = http.get(url, policy.request, (response) => {
      const status = response.statusCode ?? 0
      counters.response(status)
      policy.onStatus?.(status)
      response.resume()
      response.once('end', again)
      response.once('close', again)
    })
    request.once('error', (error) => {
      if (!stopped) counters.failure(error)
      again()
    })
  }
  connect()
  return () => {
    stopped = true
    clearTimeout(timer)
    request?.destroy()
  }
}
