/**
 * "Every event once, in order, then the end": the accounting of one answer's tokens as a client
 * received them, across every connection it took (cut on one instance, resumed on another).
 * Pure; cheap on the in-order path (a counter), so it runs on every token of the throughput phase.
 */

/** What a set of answers received, summed; every field but `answers` and `delivered` is a violation. */
export interface OrderCounts {
  answers: number
  /** Distinct tokens received (each counted once however often it came). */
  delivered: number
  /** A token received again. */
  duplicates: number
  /** A token received after one that comes after it (it arrived, late). */
  outOfOrder: number
  /** Tokens of the answer never received. */
  missing: number
  /** A token outside the answer (a number it never had, or anything after its end). */
  unexpected: number
  /** Answers whose end never came. */
  unended: number
}

export const NO_COUNTS: Readonly<OrderCounts> = Object.freeze({ answers: 0, delivered: 0, duplicates: 0, outOfOrder: 0, missing: 0, unexpected: 0, unended: 0 })

/** The violations in `counts`: every token not received exactly once and in order, every end missing. */
export function violations (counts: OrderCounts): number {
  return counts.duplicates + counts.outOfOrder + counts.missing + counts.unexpected + counts.unended
}

export function addCounts (a: OrderCounts, b: OrderCounts): OrderCounts {
  return {
    answers: a.answers + b.answers,
    delivered: a.delivered + b.delivered,
    duplicates: a.duplicates + b.duplicates,
    outOfOrder: a.outOfOrder + b.outOfOrder,
    missing: a.missing + b.missing,
    unexpected: a.unexpected + b.unexpected,
    unended: a.unended + b.unended
  }
}

/**
 * One answer of `expected` tokens numbered 0…expected-1: `add` each token as it arrives (on
 * whichever connection), `end` at its end, `counts` at the end of the run.
 */
export class OrderLedger {
  /** The token due next if everything comes in order. */
  private next = 0
  /** Numbers skipped over (a token came before them): missing unless they turn up late. */
  private readonly gaps = new Set<number>()
  private delivered = 0
  private duplicates = 0
  private outOfOrder = 0
  private unexpected = 0
  private ended = false

  constructor (readonly expected: number) {}

  /** The number of the newest token received in order so far, or -1 (what a resume would ask after). */
  get last (): number {
    return this.next - 1
  }

  get received (): number {
    return this.delivered
  }

  get hasEnded (): boolean {
    return this.ended
  }

  add (n: number): void {
    if (this.ended || !Number.isSafeInteger(n) || n < 0 || n >= this.expected) {
      this.unexpected++
    } else if (n === this.next) {
      this.next++
      this.delivered++
    } else if (n > this.next) {
      for (let skipped = this.next; skipped < n; skipped++) this.gaps.add(skipped)
      this.next = n + 1
      this.delivered++
    } else if (this.gaps.delete(n)) {
      this.outOfOrder++
      this.delivered++
    } else {
      this.duplicates++
    }
  }

  end (): void {
    if (this.ended) this.unexpected++
    this.ended = true
  }

  counts (): OrderCounts {
    return {
      answers: 1,
      delivered: this.delivered,
      duplicates: this.duplicates,
      outOfOrder: this.outOfOrder,
      missing: this.gaps.size + (this.expected - this.next),
      unexpected: this.unexpected,
      unended: this.ended ? 0 : 1
    }
  }
}
