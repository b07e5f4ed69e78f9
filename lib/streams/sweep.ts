import type { Registry } from './registry'
import { HEARTBEAT_FRAME } from '../events/encoder'
import type { RandomSource } from '../shared/clocks'
import { inSlices } from '../shared/slices'

/** Drain batches are this far apart (fewer batches when there are fewer streams). */
const DRAIN_STEP_MS = 50
/**
 * Streams a heartbeat sweeps per turn of the event loop: a sweep over tens of thousands yields to
 * I/O between slices instead of holding the loop through all of them.
 */
const HEARTBEAT_SLICE = 500

/** The passes over every open stream: the one heartbeat, and the staged drain at shutdown. */
export class Sweep {
  /** Cancels the heartbeat sweep under way (null: none is). */
  private cancelBeat: (() => void) | null = null

  constructor (private readonly registry: Registry, private readonly random: RandomSource) {}

  /**
   * One heartbeat for everyone: a comment frame, skipping backpressured streams, sweeping dead
   * ones, HEARTBEAT_SLICE streams a turn. A sweep still under way when the next beat comes is
   * left to finish.
   */
  heartbeat (): void {
    if (this.cancelBeat !== null) return
    this.cancelBeat = inSlices([...this.registry.all()], HEARTBEAT_SLICE, (subscriber) => subscriber.heartbeat(HEARTBEAT_FRAME), () => { this.cancelBeat = null })
  }

  /**
   * Staged drain for shutdown: the streams end (each with its own `retry:`) in shuffled batches
   * spread over `drainMs`, so a restart does not bring every client back in one second. Resolves
   * when the last batch has ended.
   */
  drain (drainMs: number): Promise<void> {
    const subscribers = [...this.registry.all()]
    for (let i = subscribers.length - 1; i > 0; i--) {
      const j = Math.floor(this.random() * (i + 1))
      ;[subscribers[i], subscribers[j]] = [subscribers[j], subscribers[i]]
    }
    const batches = Math.max(1, Math.min(subscribers.length, Math.floor(drainMs / DRAIN_STEP_MS)))
    let batch = 0
    return new Promise((resolve) => {
      const step = (): void => {
        const from = Math.floor(batch * subscribers.length / batches)
        const to = Math.floor((batch + 1) * subscribers.length / batches)
        for (const subscriber of subscribers.slice(from, to)) subscriber.end('shutdown')
        if (++batch < batches) setTimeout(step, drainMs / batches)
        else resolve()
      }
      step()
    })
  }

  /** Stops a heartbeat sweep under way. */
  stop (): void {
    this.cancelBeat?.()
    this.cancelBeat = null
  }
}
