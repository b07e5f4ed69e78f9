import type { RandomSource } from './backoff'

export type { RandomSource }

/**
 * A whole number drawn uniformly from [center - spread, center + spread], never below `floor`.
 * Used for every delay that many clients share (retry, max age, Retry-After) so that clients
 * which arrived together do not come back together.
 */
export function jitter (center: number, spread: number, random: RandomSource, floor = 0): number {
  const value = Math.round(center + (random() * 2 - 1) * spread)
  return value < floor ? floor : value
}
