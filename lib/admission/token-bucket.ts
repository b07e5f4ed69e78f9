/** Far below any fraction of a token a clock can make, far above float subtraction's error. */
const ROUNDING = 1e-9

/**
 * The connect-rate guard: at most `ratePerSecond` admissions on average, `burst` at once.
 * Refilled lazily from the clock on each take, so it needs no timer.
 */
export class TokenBucket {
  private tokens: number
  private refilledAt: number

  constructor (private readonly ratePerSecond: number, private readonly burst: number, now: number) {
    this.tokens = burst
    this.refilledAt = now
  }

  take (now: number): boolean {
    // A clock stepped back refills nothing (and takes nothing back): elapsed time is never negative.
    this.tokens = Math.min(this.burst, this.tokens + Math.max(0, now - this.refilledAt) * this.ratePerSecond / 1000)
    this.refilledAt = now
    // Within a rounding error of a whole token is one: 4298.015275 − 3298.015275 is 999.9999999999996.
    if (this.tokens < 1 - ROUNDING) return false
    this.tokens -= 1
    return true
  }

  /** Seconds until the next token, for Retry-After. */
  secondsUntilToken (): number {
    return Math.max(1, Math.ceil((1 - this.tokens) / this.ratePerSecond))
  }
}
