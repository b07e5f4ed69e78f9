/**
 * How stormy admission is, measured in whole seconds and updated lazily on each refusal (no
 * timer). A second with more than `thresholdPerSecond` refusals raises the level by one; a calmer
 * second lowers it by one. Each level doubles the delays handed out, up to a bound, so clients
 * that honour them spread further apart while the storm lasts and come back sooner once it ends.
 */
export class StormMeter {
  private second = 0
  private refusalsThisSecond = 0
  private level = 0

  constructor (private readonly thresholdPerSecond: number, private readonly maxLevel: number) {}

  /** Counts one refusal at `now` (ms). */
  recordRefusal (now: number): void {
    this.roll(now)
    this.refusalsThisSecond++
  }

  /** True while refusals come faster than the threshold (this second or the level says so). */
  isStorm (now: number): boolean {
    this.roll(now)
    return this.level > 0 || this.refusalsThisSecond > this.thresholdPerSecond
  }

  /**
   * The widening level admission would use at `now` (0: calm). A pure read: a scrape or stats()
   * call between refusals must not change how the storm is counted.
   */
  levelAt (now: number): number {
    const second = Math.floor(now / 1000)
    // A clock stepped back (wall time moved) is not a calm spell of negative length: nothing changes.
    if (second <= this.second) return this.level
    const elapsed = second - this.second
    if (this.refusalsThisSecond > this.thresholdPerSecond && elapsed === 1) return Math.min(this.level + 1, this.maxLevel)
    // The second that just ended was calm (or the meter is waking after quiet seconds).
    return Math.max(this.level - elapsed, 0)
  }

  /** Multiplier for every delay handed out now: 2^level. */
  scale (now: number): number {
    this.roll(now)
    return 2 ** this.level
  }

  private roll (now: number): void {
    const second = Math.floor(now / 1000)
    if (second === this.second) return
    this.level = this.levelAt(now)
    // Stepped back: this second goes on under the clock's new number.
    if (second < this.second) {
      this.second = second
      return
    }
    this.second = second
    this.refusalsThisSecond = 0
  }
}
