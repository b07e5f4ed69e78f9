import { isIPv4, isIPv6 } from 'node:net'

/**
 * Which address families a set of `--trust-proxy` ranges covers entirely. Every range is placed
 * in one 128-bit space, IPv4 as its IPv4-mapped block (`::ffff:a.b.c.d`), and the union is
 * compared with each family's space, as the laxest proxy-addr matches: one (Express's, and
 * Fastify's before its mapped-address fix) trusts an IPv4 address through any IPv6 range holding
 * its mapped form (`::ffff:0.0.0.0/96`, `::/1`); the one Fastify 5 uses now trusts native IPv6
 * only through ranges outside the mapped block, so that block counts as covered for IPv6.
 * `0.0.0.0/1,128.0.0.0/1` covers IPv4; `::/1,8000::/1` both.
 */

/** An inclusive range of the 128-bit space. */
export type Span = readonly [bigint, bigint]

const MAPPED_IPV4 = 0xffffn << 32n
const MAPPED_BLOCK: Span = [MAPPED_IPV4, MAPPED_IPV4 + (1n << 32n) - 1n]
const FAMILIES: ReadonlyArray<{ name: 'IPv4' | 'IPv6', span: Span, given: readonly Span[] }> = [
  { name: 'IPv4', span: MAPPED_BLOCK, given: [] },
  { name: 'IPv6', span: [0n, (1n << 128n) - 1n], given: [MAPPED_BLOCK] }
]

/** proxy-addr's named ranges, as it defines them. */
export const NAMED_RANGES: ReadonlyMap<string, readonly string[]> = new Map([
  ['loopback', ['127.0.0.1/8', '::1/128']],
  ['linklocal', ['169.254.0.0/16', 'fe80::/10']],
  ['uniquelocal', ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7']]
])

function ipv4Value (text: string): bigint {
  return text.split('.').reduce((value, octet) => (value << 8n) + BigInt(octet), 0n)
}

/** An IPv4 or IPv6 address as its place in the 128-bit space (IPv4 mapped), or null. */
function addressValue (text: string): bigint | null {
  if (isIPv4(text)) return MAPPED_IPV4 + ipv4Value(text)
  if (!isIPv6(text)) return null
  // The zone (fe80::1%eth0) names an interface, not bits; a trailing dotted quad is the last two words.
  const hex = text.replace(/%.*$/s, '').replace(/\d+\.\d+\.\d+\.\d+$/, (quad) => {
    const value = ipv4Value(quad)
    return `${(value >> 16n).toString(16)}:${(value & 0xffffn).toString(16)}`
  })
  const [left, right] = hex.split('::')
  const words = (part: string): string[] => part === '' ? [] : part.split(':')
  const groups = right === undefined
    ? words(left)
    : [...words(left), ...Array<string>(8 - words(left).length - words(right).length).fill('0'), ...words(right)]
  return groups.reduce((value, word) => (value << 16n) + BigInt(`0x${word}`), 0n)
}

/** `address` or `address/bits` as its span, or null when it is neither (or the prefix is out of range). */
function rangeSpan (entry: string): Span | null {
  const [address, prefix, extra] = entry.split('/')
  const value = addressValue(address)
  if (value === null || extra !== undefined) return null
  const bits = isIPv4(address) ? 32 : 128
  if (prefix !== undefined && !(/^\d{1,3}$/.test(prefix) && Number(prefix) <= bits)) return null
  const hostBits = BigInt(bits - (prefix === undefined ? bits : Number(prefix)))
  const first = value >> hostBits << hostBits
  return [first, first + (1n << hostBits) - 1n]
}

/** A `--trust-proxy` entry (address, CIDR range or range name) as its spans, or null when it is none of these. */
export function entrySpans (entry: string): Span[] | null {
  const spans = (NAMED_RANGES.get(entry) ?? [entry]).map(rangeSpan)
  return spans.every((span) => span !== null) ? spans : null
}

/** The families (IPv4, IPv6) whose every address lies in the union of `spans`. */
export function coveredFamilies (spans: readonly Span[]): Array<'IPv4' | 'IPv6'> {
  return FAMILIES.filter(({ span: [from, to], given }) => {
    const sorted = [...spans, ...given].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    // Walks the spans in order, extending the covered run from `from`; a gap before `to` ends it.
    let next = from
    for (const [start, end] of sorted) {
      if (start > next) break
      if (end >= next) next = end + 1n
      if (next > to) return true
    }
    return false
  }).map(({ name }) => name)
}
