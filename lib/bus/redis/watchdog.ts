import type { RedisConnection } from './connection'
import type { ServerFacts } from './server-facts'

/** Unanswered for this long, the watchdog's TIME says the bus is down. */
export const STALL_MS = 1000
/** No own probe seen for this long (two probes lost and a margin): the instance cannot prove it receives, the bus is down. */
export const RECEIVE_DEADLINE_MS = 2500
/** Down for this long without proof of receiving: every stream here is told and closed with a jittered retry, again each such spell. */
export const DEAF_CLOSE_MS = 5000

/**
 * The bus's watch on its server between publishes: one TIME outstanding at most (unanswered for
 * STALL_MS, the server is stalled: connections stay up while commands hang), which also keeps the
 * clock offset fresh; and the deaf spells (no proof of receiving for DEAF_CLOSE_MS past the
 * receive deadline), told once per spell.
 */
export class Watchdog {
  /** When the outstanding TIME was sent, monotonic ms (null: none outstanding). */
  private probeSentAt: number | null = null
  private stalledNow = false
  /** When the streams were last closed for a deaf spell (monotonic ms). */
  private deafClosedAt = -Infinity

  constructor (
    private readonly clocks: { now: () => number, monotonic: () => number },
    private readonly deafCloseMs: number,
    /** Called when `stalled` changes. */
    private readonly changed: () => void
  ) {}

  get stalled (): boolean {
    return this.stalledNow
  }

  /** Whether this instance, silent for `silentMs`, is deaf long enough that its streams are to be closed now (once per spell). */
  deafSpellOver (silentMs: number): boolean {
    const spell = RECEIVE_DEADLINE_MS + this.deafCloseMs
    if (silentMs <= spell || this.clocks.monotonic() - this.deafClosedAt < spell) return false
    this.deafClosedAt = this.clocks.monotonic()
    return true
  }

  /**
   * Sends a TIME unless one is outstanding; one outstanding for STALL_MS marks the server stalled
   * until it is answered. A quick answer refreshes the offset of the server's facts as they are then.
   * The TIME goes to the server holding `slotKey` (on a Cluster, the node of the pipeline's keyed command).
   */
  probe (publisher: RedisConnection, slotKey: string, facts: () => ServerFacts | null): void {
    if (this.probeSentAt !== null) {
      if (!this.stalledNow && this.clocks.monotonic() - this.probeSentAt >= STALL_MS) {
        this.stalledNow = true
        this.changed()
      }
      return
    }
    if (publisher.status !== 'ready') return
    this.probeSentAt = this.clocks.monotonic()
    const sent = this.clocks.now()
    // Behind a command on the slot's key: on a Cluster the TIME is the slot's node's.
    publisher.pipeline().exists(slotKey).time().exec().then((replies) => {
      const [error, time] = replies?.[1] ?? [new Error('no reply')]
      if (error !== null) return
      // Every round trip is a sample; the clock keeps the best of the recent ones.
      facts()?.clock.add(time, sent, this.clocks.now())
    }).catch(() => undefined).finally(() => {
      this.probeSentAt = null
      if (!this.stalledNow) return
      this.stalledNow = false
      this.changed()
    })
  }
}
