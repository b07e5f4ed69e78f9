import { readFileSync } from 'node:fs'

/** TIME_WAIT sockets on one port, by the side that closed first and now holds them. */
export interface TimeWaitCount {
  /** Local port is the peer's ephemeral port: these block ephemeral ports on the client host. */
  client: number
  /** Local port is the server's port: these cost the server a little memory, no ephemeral port. */
  server: number
}

/** The kernel's socket tables of the current network namespace (IPv6 may be absent). */
const TABLES = ['/proc/net/tcp', '/proc/net/tcp6']
/** `st` column value of TIME_WAIT in /proc/net/tcp (include/net/tcp_states.h). */
const TIME_WAIT = '06'

/** Which sockets to count, and where the kernel's tables are read from (tests pass their own). */
export interface TimeWaitFilter {
  /** Only connections whose client end has one of these ports: a run's own, not an earlier listener's on a reused port. */
  clientPorts?: ReadonlySet<number>
  tables?: readonly string[]
}

/**
 * Counts TIME_WAIT sockets that involve `port`, reading /proc/net/tcp{,6} once. On loopback both
 * ends of a connection appear in the same table, told apart by which end owns the port.
 */
export function countTimeWait (port: number, { clientPorts, tables = TABLES }: TimeWaitFilter = {}): TimeWaitCount {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`port must be an integer 1-65535, got ${port}`)
  const hexPort = hex(port)
  const ours = (address: string): boolean => clientPorts === undefined || clientPorts.has(Number.parseInt(address.slice(address.lastIndexOf(':') + 1), 16))
  const count: TimeWaitCount = { client: 0, server: 0 }
  for (const table of tables) {
    let text: string
    try {
      text = readFileSync(table, 'latin1')
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue
      throw error
    }
    // Columns: sl local_address rem_address st …, addresses as HEXIP:HEXPORT.
    for (const line of text.split('\n')) {
      const [, local, remote, state] = line.trim().split(/\s+/, 4)
      if (state !== TIME_WAIT) continue
      if (local.endsWith(hexPort) && ours(remote)) count.server++
      else if (remote.endsWith(hexPort) && ours(local)) count.client++
    }
  }
  return count
}

function hex (port: number): string {
  return ':' + port.toString(16).toUpperCase().padStart(4, '0')
}
