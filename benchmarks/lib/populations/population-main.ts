/**
 * One client population, in its own process: `population-main <name> <size> <settings JSON>`.
 * Answers its runner over IPC: `start` (with the server's url), `stats`, `stop` (every client closed).
 */
import { serveIpc } from '../ipc'
import type { PopulationName } from './names'
import type { Population, PopulationSettings, PopulationStart } from './contract'
import { ClientCounters } from './counters'
import { startAutocannon } from './autocannon'
import { startBackoffClients } from './backoff'
import { startBrowsers } from './browser'
import { startTowerSseClients } from './client'
import { startDashboards } from './dashboard'
import { startHammers } from './hammer'

const STARTS: Record<PopulationName, PopulationStart> = {
  browser: startBrowsers,
  dashboard: startDashboards,
  backoff: startBackoffClients,
  hammer: startHammers,
  autocannon: startAutocannon,
  client: startTowerSseClients
}

const [name, sizeText, settingsJson] = process.argv.slice(2)
if (!Object.hasOwn(STARTS, name)) throw new Error(`population-main: unknown population "${name}"; known: ${Object.keys(STARTS).join(', ')}`)
const size = Number(sizeText)
if (!Number.isSafeInteger(size) || size < 1) throw new Error(`population-main: size must be an integer >= 1, got ${sizeText}`)
const settings = JSON.parse(settingsJson) as PopulationSettings
const counters = new ClientCounters()
let population: Population | undefined

serveIpc('population-main', {
  start: (request) => {
    if (population !== undefined) throw new Error('population-main: already started')
    if (typeof request.url !== 'string') throw new Error(`population-main: start needs the server's url, got ${String(request.url)}`)
    population = STARTS[name as PopulationName](request.url, size, counters, settings)
    return counters.snapshot()
  },
  stats: () => counters.snapshot(),
  stop: async () => {
    await population?.close()
    return null
  }
})
