/**
 * The delays many clients and connections share, so that those that failed together do not come
 * back together: pure functions, tested over many seeded draws. Compiled into the plugin and into
 * the client's browser build alike, so it imports nothing.
 */

/** A source of uniform numbers in [0, 1); injectable so tests can seed it. */
export type RandomSource = () => number

/**
 * Exponential backoff with full jitter: uniform in [0, min(cap, base × 2^(failures - 1))].
 * Full jitter spreads clients that failed together over the whole window instead of a band.
 */
export function backoffDelayMs (failures: number, random: RandomSource, baseMs: number, capMs: number): number {
  if (!Number.isSafeInteger(failures) || failures < 1) {
    throw Object.assign(new RangeError(`tower-sse/client: failures must be an integer >= 1, got ${failures}`), { code: 'TOWER_SSE_CLIENT_ARGUMENT' })
  }
  // 2^(failures-1) overflows to Infinity for huge counts, which the cap absorbs.
  const ceiling = Math.min(capMs, baseMs * 2 ** (failures - 1))
  return Math.floor(random() * ceiling)
}

/** A wait of at least `ms`, stretched by up to `ratio` × ms so that clients do not return together. */
export function jitterUpMs (ms: number, ratio: number, random: RandomSource): number {
  return Math.round(ms * (1 + ratio * random()))
}
