import { isIPv4, isIPv6 } from 'node:net'

/**
 * The key of a client address for per-key limits, in one canonical form per group of addresses
 * one client can hold: every spelling of an address is one key (`::ffff:1.1.1.1`,
 * `::ffff:101:101` and `0:0:0:0:0:ffff:0101:0101` are `1.1.1.1`), and an IPv6 address counts by
 * its prefix (a /64 is one home connection: 2^64 addresses to dodge a per-address cap with).
 * Anything that is not an address (a forwarded `unknown`, `<script>`) is no key of its own: all
 * such requests share one.
 */
export interface AddressGrouping {
  /** IPv4 addresses count by this prefix (32: each address). */
  ipv4PrefixLength: number
  /** IPv6 addresses count by this prefix (64, as rate limiters do; 128: each address). */
  ipv6PrefixLength: number
}

export const DEFAULT_ADDRESS_GROUPING: Readonly<AddressGrouping> = Object.freeze({ ipv4PrefixLength: 32, ipv6PrefixLength: 64 })

/** The one key every request whose address is not an IP address shares. */
export const UNADDRESSED_KEY = 'ip:invalid'

export function addressKey (address: string | undefined, grouping: AddressGrouping = DEFAULT_ADDRESS_GROUPING): string {
  if (address === undefined) return UNADDRESSED_KEY
  if (isIPv4(address)) {
    // Node's dotted quads have no leading zeros: each address is spelled one way, its own key.
    if (grouping.ipv4PrefixLength === 32) return `ip:${address}`
    return ipv4Key(ipv4Words(address), grouping.ipv4PrefixLength)
  }
  const words = ipv6Words(address)
  if (words === null) return UNADDRESSED_KEY
  // IPv4-mapped (::ffff:a.b.c.d): the IPv4 client it stands for.
  if (words.slice(0, 5).every((word) => word === 0) && words[5] === 0xffff) {
    return ipv4Key([words[6] >> 8, words[6] & 0xff, words[7] >> 8, words[7] & 0xff], grouping.ipv4PrefixLength)
  }
  const prefix = grouping.ipv6PrefixLength
  const masked = words.map((word, i) => word & wordMask(prefix - 16 * i))
  return `ip:${masked.map((word) => word.toString(16)).join(':')}/${prefix}`
}

function ipv4Key (octets: number[], prefix: number): string {
  const masked = octets.map((octet, i) => octet & (wordMask(prefix - 8 * i) >> 8))
  return prefix === 32 ? `ip:${masked.join('.')}` : `ip:${masked.join('.')}/${prefix}`
}

function ipv4Words (address: string): number[] {
  return address.split('.').map(Number)
}

/** The bits of a 16-bit word a prefix keeps when `bits` of it remain (≤ 0: none, ≥ 16: all). */
function wordMask (bits: number): number {
  if (bits <= 0) return 0
  if (bits >= 16) return 0xffff
  return (0xffff << (16 - bits)) & 0xffff
}

/** The eight 16-bit words of an IPv6 address (zone id dropped), or null when it is none. */
function ipv6Words (text: string): number[] | null {
  const address = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text
  const zone = address.indexOf('%')
  let bare = zone === -1 ? address : address.slice(0, zone)
  if (!isIPv6(bare)) return null
  // A trailing dotted quad (::ffff:1.2.3.4) is the last two words.
  if (bare.includes('.')) {
    const lastColon = bare.lastIndexOf(':')
    const [a, b, c, d] = ipv4Words(bare.slice(lastColon + 1))
    bare = `${bare.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const parse = (part: string): number[] => part === '' ? [] : part.split(':').map((word) => parseInt(word, 16))
  const gap = bare.indexOf('::')
  if (gap === -1) return parse(bare)
  const left = parse(bare.slice(0, gap))
  const right = parse(bare.slice(gap + 2))
  return [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right]
}
