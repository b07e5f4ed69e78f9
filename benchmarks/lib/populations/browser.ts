import { EventSource } from 'eventsource'
import { countingFetch } from './counters'
import { eachClient, type PopulationStart } from './contract'

/**
 * Browser tabs: spec EventSource (the `eventsource` package). It reconnects after the `retry:`
 * time when a stream ends, and gives up for good on a non-200 answer.
 */
export const startBrowsers: PopulationStart = (url, size, counters) => eachClient(size, () => {
  const source = new EventSource(url, { fetch: countingFetch(counters) })
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED) counters.gaveUpForGood()
  })
  return () => source.close()
})
