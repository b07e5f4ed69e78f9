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

/** Which sockets to count, and where the kernel's tables are read from (tests pass their own). */
export interface TimeWaitFilter {
  /**
   * Only connections whose client end is one of these `address:port` (IPv4, as `socket.localAddress`
   * and `localPort` give them): a run's own, not an earlier listener's on a reused port. The whole
   * endpoint, since a busy port's earlier connections share some port numbers with any new 20.
   */
  clients?: ReadonlySet<string>
  tables?: readonly string[]
}

/** One end of a connection on a port, as the kernel lists it. */
export interface SocketEnd {
  /** `client` when the local end is the peer's ephemeral port, `server` when it is the port itself. */
  side: keyof TimeWaitCount
  /** The kernel's state name (TIME_WAIT, FIN_WAIT2, ESTABLISHED…). */
  state: string
  /** The connection's client end, `address:port`. */
  client: string
}

/** include/net/tcp_states.h, by the hex value /proc/net/tcp shows in its `st` column. */
const STATES: Record<string, string> = {
  '01': 'ESTABLISHED',
  '02': 'SYN_SENT',
  '03': 'SYN_RECV',
  '04': 'FIN_WAIT1',
  '05': 'FIN_WAIT2',
  '06': 'TIME_WAIT',
  '07': 'CLOSE',
  '08': 'CLOSE_WAIT',
  '09': 'LAST_ACK',
  '0A': 'LISTEN',
  '0B': 'CLOSING',
  '0C': 'NEW_SYN_RECV'
}

/**
 * Every connection end that involves `port`, reading /proc/net/tcp{,6} once. On loopback both
 * ends of a connection appear in the same table, told apart by which end owns the port.
 *
 * The kernel writes the table a page at a time and resumes by position in a hash bucket, so a
 * read while other sockets come and go can list a socket twice or skip one (seen: 22 TIME_WAITs
 * for 20 connections under load). Repeats are dropped here; a caller that must not miss one
 * reads until two reads agree.
 */
export function socketsOn (port: number, { clients, tables = TABLES }: TimeWaitFilter = {}): SocketEnd[] {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`port must be an integer 1-65535, got ${port}`)
  const hexPort = hex(port)
  const ends: SocketEnd[] = []
  const listed = new Set<string>()
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
      const [, local, remote, st] = line.trim().split(/\s+/, 4)
      if (local === undefined || remote === undefined || !/^[0-9A-F]{8}(?:[0-9A-F]{24})?:[0-9A-F]{4}$/.test(remote)) continue
      const side = local.endsWith(hexPort) ? 'server' : remote.endsWith(hexPort) ? 'client' : undefined
      if (side === undefined || listed.has(local + remote)) continue
      listed.add(local + remote)
      const client = endpoint(side === 'server' ? remote : local)
      if (clients === undefined || clients.has(client)) ends.push({ side, state: STATES[st] ?? st, client })
    }
  }
  return ends
}

/** TIME_WAIT sockets that involve `port`, by the side holding them. */
export function countTimeWait (port: number, filter: TimeWaitFilter = {}): TimeWaitCount {
  const count: TimeWaitCount = { client: 0, server: 0 }
  for (const end of socketsOn(port, filter)) if (end.state === 'TIME_WAIT') count[end.side]++
  return count
}

function hex (port: number): string {
  return ':' + port.toString(16).toUpperCase().padStart(4, '0')
}

/**
 * `HEXIP:HEXPORT` from /proc/net/tcp{,6} as `a.b.c.d:port`. The address is in the kernel's byte
 * order, 32-bit words little-endian here; an IPv4-mapped IPv6 address reads as its IPv4 one.
 */
function endpoint (address: string): string {
  const [ip, port] = address.split(':')
  const words = ip.match(/.{8}/g) ?? []
  const v4 = words.length === 1 ? words[0] : (ip.startsWith('0000000000000000FFFF0000') ? words[3] : undefined)
  const host = v4 === undefined ? ip : (v4.match(/../g) ?? []).reverse().map((byte) => Number.parseInt(byte, 16)).join('.')
  return `${host}:${Number.parseInt(port, 16)}`
}
