/** Bucket width: each bucket is 1% wider than the one below, so any quantile is within 1%. */
const GROWTH = 1.01
const LOG_GROWTH = Math.log(GROWTH)

/** Counts by bucket, as [bucket, count] pairs: what crosses a process boundary. */
export type HistogramCounts = Array<[number, number]>

/**
 * A log-bucketed histogram of positive values (e.g. latencies in µs): constant memory however
 * many samples, and mergeable across processes, so quantiles of millions of samples stay cheap.
 */
export class Histogram {
  private readonly buckets = new Map<number, number>()
  private total = 0
  private maximum = 0

  get count (): number {
    return this.total
  }

  get max (): number {
    return this.maximum
  }

  record (value: number, times = 1): void {
    if (!(value >= 0) || !Number.isFinite(value)) throw new RangeError(`histogram value must be a finite number >= 0, got ${value}`)
    const bucket = value <= 1 ? 0 : Math.ceil(Math.log(value) / LOG_GROWTH)
    this.buckets.set(bucket, (this.buckets.get(bucket) ?? 0) + times)
    this.total += times
    if (value > this.maximum) this.maximum = value
  }

  /** The upper bound of the bucket holding quantile q (0 < q <= 1), capped at the largest value seen. */
  quantile (q: number): number {
    if (!(q > 0 && q <= 1)) throw new RangeError(`quantile must be in (0, 1], got ${q}`)
    if (this.total === 0) return Number.NaN
    const rank = Math.ceil(q * this.total)
    let seen = 0
    for (const bucket of [...this.buckets.keys()].sort((a, b) => a - b)) {
      seen += this.buckets.get(bucket) as number
      if (seen >= rank) return Math.min(GROWTH ** bucket, this.maximum)
    }
    return this.maximum
  }

  toJSON (): { counts: HistogramCounts, max: number } {
    return { counts: [...this.buckets], max: this.maximum }
  }

  /** Adds what another histogram (possibly in another process) recorded. */
  merge (other: { counts: HistogramCounts, max: number }): void {
    for (const [bucket, times] of other.counts) {
      this.buckets.set(bucket, (this.buckets.get(bucket) ?? 0) + times)
      this.total += times
    }
    if (other.max > this.maximum) this.maximum = other.max
  }
}
