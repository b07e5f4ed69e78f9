import type { RandomSource } from './backoff'

export type { RandomSource }

/**
 * Milliseconds on a clock that never steps (performance.now): for every interval measured inside
 * this process — deadlines, rates, lag — so moving the wall clock cannot stretch or shrink one.
 * Wall time (Date.now) is only for what leaves the process: Redis deadlines, timestamps shown.
 */
export const monotonicNow = (): number => performance.now()

/**
 * Every source of time and chance the plugin reads: real ones in production, replaced only by a
 * test (`withTestClocks` of `tower-sse/testing`) that moves time by hand or seeds the jitter.
 */
export interface Clocks {
  /** Uniform numbers in [0, 1) for every jitter. */
  readonly random: RandomSource
  /** Milliseconds that never step: storm seconds, the connect-rate bucket, the idempotency window. */
  readonly monotonicNow: () => number
  /** Epoch milliseconds, what `subscribe({ expiresAt })` is read against. */
  readonly now: () => number
}

export const REAL_CLOCKS: Clocks = Object.freeze({ random: Math.random, monotonicNow, now: Date.now })
