import type { RandomSource } from './backoff'

/**
 * How far every shared delay is spread around its value (±20%): each stream's `retry:`, its max
 * age and a refusal's hold in the tarpit, so that clients which arrived together leave and come
 * back apart. One ratio for all of them: nobody tuned the three knobs it replaces apart.
 */
export const JITTER_RATIO = 0.2

/** A whole number drawn uniformly from [center - spread, center + spread], never below `floor`. */
export function jitter (center: number, spread: number, random: RandomSource, floor = 0): number {
  const value = Math.round(center + (random() * 2 - 1) * spread)
  return value < floor ? floor : value
}

/** `center` ± JITTER_RATIO, never below `floor`. */
export function jittered (center: number, random: RandomSource, floor = 0): number {
  return jitter(center, center * JITTER_RATIO, random, floor)
}
