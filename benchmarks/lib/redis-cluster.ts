// A real Redis Cluster for the tests: three `redis-server --cluster-enabled yes` masters on free
// loopback ports (no persistence; a replica each when asked), joined by `redis-cli --cluster
// create`, each under redis-server.ts's supervisor so none outlives its runner; a slot migration
// done by hand, the way `redis-cli --cluster reshard` does it, with a hook between its steps; a
// node killed (SIGKILL), for its replica to take over; and every link over TLS when asked.
import type { ChildProcess } from 'node:child_process'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { freePort } from './free-port'
import { waitFor } from './wait-for'
import { launchRedisProcess, stopRedisProcess } from './redis-server'
import { redisCommandOver } from './redis-topology'
import type { TlsCertificates } from './tls-certificates'

const READY_MS = 20_000
const MASTERS = 3

export interface ClusterOptions {
  /** Replicas per master (0: none). */
  replicas?: number
  /** cluster-node-timeout: how long a master is unreachable before its replica is promoted. */
  nodeTimeoutMs?: number
  /** Every node serves TLS only (clients, the cluster bus, replication) with these certificates. */
  tls?: TlsCertificates
}

export class RedisCluster {
  private constructor (
    readonly ports: number[],
    private readonly dir: string,
    private readonly children: ChildProcess[],
    private readonly tls: TlsCertificates | undefined
  ) {}

  /** The `redis+cluster://` URL naming every node (`rediss+cluster://` over TLS). */
  get url (): string {
    return `${this.tls === undefined ? 'redis' : 'rediss'}+cluster://${this.ports.map((port) => `127.0.0.1:${port}`).join(',')}`
  }

  static async start (options: ClusterOptions = {}): Promise<RedisCluster> {
    const replicas = options.replicas ?? 0
    const nodes = MASTERS * (1 + replicas)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redis-cluster-'))
    const ports: number[] = []
    const children: ChildProcess[] = []
    const { tls } = options
    const cluster = new RedisCluster(ports, dir, children, tls)
    try {
      for (let i = 0; i < nodes; i++) {
        const port = await freePort()
        ports.push(port)
        const listen = tls === undefined
          ? ['--port', String(port)]
          : ['--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.cert, '--tls-key-file', tls.key, '--tls-ca-cert-file', tls.ca,
              '--tls-auth-clients', 'no', '--tls-cluster', 'yes', '--tls-replication', 'yes']
        children.push(await launchRedisProcess([...listen, '--bind', '127.0.0.1', '--cluster-enabled', 'yes',
          '--cluster-config-file', path.join(dir, `nodes-${port}.conf`), '--dir', dir, '--save', '', '--appendonly', 'no',
          ...(options.nodeTimeoutMs === undefined ? [] : ['--cluster-node-timeout', String(options.nodeTimeoutMs)])]))
      }
      await promisify(execFile)('redis-cli', [...(tls === undefined ? [] : ['--tls', '--cacert', tls.ca]), '--cluster', 'create', ...ports.map((port) => `127.0.0.1:${port}`),
        '--cluster-replicas', String(replicas), '--cluster-yes'], { timeout: READY_MS })
      for (const port of ports) {
        await waitFor(`cluster node ${port} to be ok with ${nodes} nodes`, async () => {
          const info = String(await cluster.command(port, 'CLUSTER', 'INFO'))
          return /cluster_state:ok/.test(info) && new RegExp(`cluster_known_nodes:${nodes}\\b`).test(info)
        }, READY_MS, 100)
      }
      // A replica counts once it has synced: a failover before that would promote an empty one.
      if (replicas > 0) {
        for (const port of ports) {
          await waitFor(`node ${port} to be a master or a synced replica`, async () => {
            const info = String(await cluster.command(port, 'INFO', 'replication'))
            return /^role:master/m.test(info) || /^master_link_status:up/m.test(info)
          }, READY_MS, 100)
        }
      }
    } catch (error) {
      await cluster.stop()
      throw error
    }
    return cluster
  }

  command (port: number, name: string, ...args: Array<string | number>): Promise<unknown> {
    return redisCommandOver(port, this.tls === undefined ? undefined : { ca: fs.readFileSync(this.tls.ca) }, name, ...args)
  }

  async slotOf (key: string): Promise<number> {
    return Number(await this.command(this.ports[0], 'CLUSTER', 'KEYSLOT', key))
  }

  /** The port of the node serving `slot`, as the node on `askPort` (ports[0] by default) sees it. */
  async ownerOf (slot: number, askPort = this.ports[0]): Promise<number> {
    const slots = await this.command(askPort, 'CLUSTER', 'SLOTS') as Array<[number, number, [string, number, string]]>
    const range = slots.find(([from, to]) => slot >= from && slot <= to)
    if (range === undefined) throw new Error(`no node serves slot ${slot}`)
    return range[2][1]
  }

  /** The run_id of the node on `port`. */
  async runIdOf (port: number): Promise<string> {
    return /^run_id:(\w+)/m.exec(String(await this.command(port, 'INFO', 'server')))?.[1] ?? ''
  }

  /**
   * Moves `slot` to the node on `to`: IMPORTING on the target, MIGRATING on the source, its keys
   * MIGRATEd one at a time (`between` runs before each, and once after the last, while the slot is
   * half moved: ASK and TRYAGAIN time), then SETSLOT NODE on every node, target first.
   */
  async migrateSlot (slot: number, to: number, between: () => Promise<void> = async () => {}): Promise<void> {
    const from = await this.ownerOf(slot)
    if (from === to) throw new Error(`slot ${slot} is already on ${to}`)
    const [fromId, toId] = await Promise.all([from, to].map(async (port) => String(await this.command(port, 'CLUSTER', 'MYID'))))
    await this.command(to, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId)
    await this.command(from, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId)
    for (let moved = 0; moved < 100_000; moved++) {
      await between()
      const [key] = await this.command(from, 'CLUSTER', 'GETKEYSINSLOT', slot, 1) as string[]
      if (key === undefined) break
      await this.command(from, 'MIGRATE', '127.0.0.1', to, '', 0, 5000, 'KEYS', key)
    }
    for (const port of [to, from, ...this.ports.filter((port) => port !== to && port !== from)]) {
      await this.command(port, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId)
    }
    await waitFor(`every node to see slot ${slot} on ${to}`, async () => {
      for (const port of this.ports) {
        const slots = await this.command(port, 'CLUSTER', 'SLOTS') as Array<[number, number, [string, number, string]]>
        if (slots.find(([low, high]) => slot >= low && slot <= high)?.[2][1] !== to) return false
      }
      return true
    }, READY_MS, 100)
  }

  /** SIGKILLs the node on `port` (its supervisor stays the one to reap it); its replica may then take its slots over. */
  async kill (port: number): Promise<void> {
    const child = this.children[this.ports.indexOf(port)]
    if (child === undefined) throw new Error(`no cluster node on ${port}`)
    await stopRedisProcess(child)
  }

  async stop (): Promise<void> {
    await Promise.all(this.children.map(stopRedisProcess))
    fs.rmSync(this.dir, { recursive: true, force: true })
  }
}
