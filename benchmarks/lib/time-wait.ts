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

/**
 * Counts TIME_WAIT sockets that involve `port`, reading /proc/net/tcp{,6} once. On loopback both
 * ends of a connection appear in the same table, told apart by which end owns the port.
 */
export function countTimeWait (port: number, tables: readonly string[] = TABLES): TimeWaitCount {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`port must be an integer 1-65535, got ${port}`)
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0')
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
      const fields = line.trim().split(/\s+/, 4)
      if (fields[3] !== TIME_WAIT) continue
      if (fields[1].endsWith(':' + hexPort)) count.server++
      else if (fields[2].endsWith(':' + hexPort)) count.client++
    }
  }
  return count
}
