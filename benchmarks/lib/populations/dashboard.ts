import { EventSource } from 'eventsource'
import { countingFetch } from './counters'
import { eachClient, type PopulationStart } from './contract'

const MANUAL_RECONNECT_MIN_MS = 2000
const MANUAL_RECONNECT_SPREAD_MS = 3000

/**
 * Tower's dashboard after upstream's patch: an EventSource, plus a new one 2–5 s after the
 * browser gave up on it (a 503 closes an EventSource for good), whatever Retry-After said.
 */
export const startDashboards: PopulationStart = (url, size, counters) => eachClient(size, () => {
  let source: EventSource
  let timer: NodeJS.Timeout | undefined
  const open = (): void => {
    source = new EventSource(url, { fetch: countingFetch(counters) })
    source.addEventListener('error', () => {
      if (source.readyState !== EventSource.CLOSED) return
      timer = setTimeout(open, MANUAL_RECONNECT_MIN_MS + Math.random() * MANUAL_RECONNECT_SPREAD_MS)
    })
  }
  open()
  return () => {
    clearTimeout(timer)
    source.close()
  }
})
