import { randomFillSync } from 'node:crypto'

/**
 * Random bytes drawn from a pool filled 4 KB at a time: one call into the system's generator per
 * pool, not one per id. A randomBytes call per publish was a tenth of an instance's CPU publishing
 * flat out, and crypto.randomUUID() grew the server's resident memory by about 3 KB for every
 * stream it opened (measured, with the pool beside it).
 */
const pool = Buffer.alloc(4096)
let used = pool.length

/** `count` random bytes: a view of the pool, valid until the next draw (read it at once). */
function draw (count: number): Buffer {
  if (used + count > pool.length) {
    randomFillSync(pool)
    used = 0
  }
  const bytes = pool.subarray(used, used + count)
  used += count
  return bytes
}

/** A new unguessable id: 128 random bits as 22 characters of base64url. */
export function randomId (): string {
  return draw(16).toString('base64url')
}

/** A short random name of [0-9a-z] (64 random bits, at most 12 characters): an epoch's. */
export function randomName (): string {
  return BigInt('0x' + draw(8).toString('hex')).toString(36).slice(0, 12)
}
