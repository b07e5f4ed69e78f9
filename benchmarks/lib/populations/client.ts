import { TowerSseClient } from '../../../lib/client'
import { countingFetch } from './counters'
import { eachClient, type PopulationStart } from './contract'

/** The project's own client with its defaults: honours Retry-After, backs off with full jitter. */
export const startTowerSseClients: PopulationStart = (url, size, counters) => eachClient(size, () => {
  const client = new TowerSseClient(url, { fetch: countingFetch(counters) })
  client.addEventListener('statechange', (event) => {
    if (event.state.kind === 'closed' && event.state.error !== null) counters.gaveUpForGood()
  })
  return () => client.close()
})
