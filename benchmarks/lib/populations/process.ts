import { CHILD_REQUEST_TIMEOUT_MS, CHILD_START_TIMEOUT_MS, IpcClient } from '../ipc'
import { spawnSibling } from '../spawn-sibling'
import type { PopulationName } from './names'
import type { PopulationSettings } from './contract'
import type { ClientStats } from './stats'

/**
 * A client population in its own process (population-main), spawned while its server starts;
 * its clients connect on `start(url)`.
 */
export class PopulationProcess {
  readonly ipc: IpcClient

  /** `launcher`: a command the process runs under, e.g. ['taskset', '-c', '1']. */
  constructor (name: PopulationName, size: number, settings: PopulationSettings, label: string, launcher?: string[]) {
    this.ipc = new IpcClient(spawnSibling(__filename, 'population-main', {
      args: [name, String(size), JSON.stringify(settings)],
      launcher
    }), `population (${label})`)
  }

  async start (url: string): Promise<ClientStats> {
    return await this.ipc.request<ClientStats>({ type: 'start', url }, CHILD_START_TIMEOUT_MS)
  }

  async stats (): Promise<ClientStats> {
    return await this.ipc.request<ClientStats>({ type: 'stats' }, CHILD_REQUEST_TIMEOUT_MS)
  }

  /** Stops every client (and every pending reconnect). */
  async stop (): Promise<void> {
    await this.ipc.request({ type: 'stop' }, CHILD_REQUEST_TIMEOUT_MS)
  }

  async exit (): Promise<void> {
    await this.ipc.exit()
  }
}
