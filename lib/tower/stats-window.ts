import type { SseStats } from '..'
import { StatsWindowError } from './errors'

/** Connects (streams admitted) and rejects (refusals) in one sampled second. */
export interface SecondSample {
  /** Epoch milliseconds at which the second was sampled (its end). */
  t: number
  connects: number
  rejects: number
}

export interface WindowSnapshot {
  lastMinute: { connects: number, rejects: number }
  /** Oldest first, at most one entry per sampled second of the last minute. */
  perSecond: SecondSample[]
}

type Counters = Pick<SseStats, 'accepted' | 'rejected'>

/**
 * Connects and rejects over the last minute, from the plugin's ever-growing counters:
 * `sample()` (once a second) stores the difference since the previous sample.
 */
export class StatsWindow {
  private readonly samples: SecondSample[] = []
  private previous: Counters

  constructor (
    private readonly read: () => Counters,
    private readonly seconds = 60,
    private readonly now: () => number = Date.now
  ) {
    if (!Number.isSafeInteger(seconds) || seconds < 1) {
      throw new StatsWindowError(seconds)
    }
    this.previous = pick(read())
  }

  sample (): void {
    const current = pick(this.read())
    this.samples.push({
      t: this.now(),
      connects: current.accepted - this.previous.accepted,
      rejects: current.rejected - this.previous.rejected
    })
    if (this.samples.length > this.seconds) this.samples.shift()
    this.previous = current
  }

  /**
   * `lastMinute` covers the newest `seconds - 1` samples plus what happened since the last
   * sample, so a connect or a refusal shows at once rather than up to a second later.
   */
  snapshot (): WindowSnapshot {
    const current = pick(this.read())
    const lastMinute = {
      connects: current.accepted - this.previous.accepted,
      rejects: current.rejected - this.previous.rejected
    }
    for (const s of this.samples.slice(Math.max(0, this.samples.length - (this.seconds - 1)))) {
      lastMinute.connects += s.connects
      lastMinute.rejects += s.rejects
    }
    return { lastMinute, perSecond: this.samples.map((s) => ({ ...s })) }
  }
}

function pick ({ accepted, rejected }: Counters): Counters {
  return { accepted, rejected }
}
