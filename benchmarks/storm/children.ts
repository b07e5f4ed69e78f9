import { CHILD_REQUEST_TIMEOUT_MS, CHILD_START_TIMEOUT_MS, IpcClient } from '../lib/ipc'
import { spawnSibling } from '../lib/spawn-sibling'
import type { ServerVariant } from './servers'
import { EVENTS_PATH } from './servers/contract'
import type { ServerStats } from './stats'

/** A server under test in its own process (server-main), listening on loopback. */
export class ServerProcess {
  private constructor (readonly ipc: IpcClient, readonly port: number) {}

  /** Starts the variant on `port` (0: an ephemeral one). */
  static async start (variant: ServerVariant, label: string, port = 0): Promise<ServerProcess> {
    const args = [variant.setup, JSON.stringify(variant.options), String(port)]
    const ipc = new IpcClient(spawnSibling(__filename, 'server-main', { args }), `server (${label})`)
    try {
      return new ServerProcess(ipc, await ipc.request<number>({ type: 'port' }, CHILD_START_TIMEOUT_MS))
    } catch (error) {
      await ipc.exit()
      throw error
    }
  }

  get url (): string {
    return `http://127.0.0.1:${this.port}${EVENTS_PATH}`
  }

  async stats (): Promise<ServerStats> {
    return await this.ipc.request<ServerStats>({ type: 'stats' }, CHILD_REQUEST_TIMEOUT_MS)
  }

  /** Closes the server (its last log lines included) and returns its final counts. */
  async stop (): Promise<ServerStats> {
    return await this.ipc.request<ServerStats>({ type: 'stop' }, CHILD_REQUEST_TIMEOUT_MS)
  }

  async exit (): Promise<void> {
    await this.ipc.exit()
  }
}
