import type { ChildProcess } from 'node:child_process'
import { Redis } from 'ioredis'
import { freePort, killGroup, spawnGroup, waitFor } from './processes'

const READY_TIMEOUT_MS = 10_000

/** A redis-server of this run's own, on a free loopback port, without persistence. */
export class RedisServer {
  private child: ChildProcess | null = null
  private constructor (readonly port: number) {}

  get url (): string {
    return `redis://127.0.0.1:${this.port}`
  }

  static async start (): Promise<RedisServer> {
    const server = new RedisServer(await freePort())
    await server.launch()
    return server
  }

  private async launch (): Promise<void> {
    const child = spawnGroup('redis-server', [
      '--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'
    ], { stdio: ['ignore', 'ignore', 'inherit'] })
    this.child = child
    let exited = false
    child.once('exit', () => { exited = true })
    await waitFor(`redis-server on port ${this.port}`, async () => {
      if (exited) throw new Error(`redis-server on port ${this.port} exited at start`)
      return await this.ping()
    }, READY_TIMEOUT_MS)
  }

  private async ping (): Promise<boolean> {
    const probe = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false })
    probe.on('error', () => {})
    try {
      await probe.connect()
      return (await probe.ping()) === 'PONG'
    } catch {
      return false
    } finally {
      probe.disconnect()
    }
  }

  /** SIGKILL: whatever it held is gone (it never had persistence). */
  async kill (): Promise<void> {
    const child = this.child
    if (child === null) return
    this.child = null
    const exited = new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve()
      else child.once('exit', () => resolve())
    })
    killGroup(child.pid as number)
    await exited
  }

  /** Starts again on the same port (empty); resolves once it answers PING. */
  async startAgain (): Promise<void> {
    await this.launch()
  }

  /** Calls per command since this server started (`INFO commandstats`), lower-case names. */
  async commandCalls (): Promise<Record<string, number>> {
    const client = new Redis(this.url, { maxRetriesPerRequest: 1, retryStrategy: () => null })
    client.on('error', () => {})
    try {
      return parseCommandStats(await client.info('commandstats'))
    } finally {
      client.disconnect()
    }
  }
}

/** `cmdstat_xrange:calls=3,usec=…` lines → { xrange: 3 }. */
export function parseCommandStats (info: string): Record<string, number> {
  const calls: Record<string, number> = {}
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[match[1]] = Number(match[2])
  return calls
}
