import { formatEventId, newEpoch, type EventPosition } from './event-id'
import { BusClosedError, IdempotencyConflictError } from '../errors'
import { monotonicNow } from '../shared/clocks'
import type { Bus, BusMessage, BusRead, BusStats, Deliver, Published, StartPoint } from './bus'

const NOT_SUBSCRIBED: Deliver = () => 0
/** Idempotency keys remembered at most (the oldest go first): the window shortens rather than memory grow. */
const MAX_IDEMPOTENCY_KEYS = 100_000

/**
 * One process, no storage: publish delivers in the same call, so a broadcast's frames are written
 * before broadcast() returns. The registry's ring is the only history, so read() has nothing more.
 * Nothing here can lose an event, so it never reports a discontinuity.
 */
export class MemoryBus implements Bus {
  readonly shared = false
  private readonly epoch: string
  private seq = 0
  private deliver: Deliver = NOT_SUBSCRIBED
  private closed = false
  /** Idempotency key → the id its first publish got, its event's hash and when; in insertion (= time) order. */
  private readonly keys = new Map<string, { id: string, hash: string | undefined, at: number }>()

  /** `now`: the monotonic clock the idempotency window is measured on. */
  constructor (private readonly idempotencyWindowMs: number, private readonly now: () => number = monotonicNow) {
    // Wall time: an epoch is told apart from the epochs of earlier runs, which no monotonic clock spans.
    this.epoch = newEpoch()
  }

  async subscribe (deliver: Deliver): Promise<StartPoint> {
    this.deliver = deliver
    return { floor: { epoch: this.epoch, major: 0, minor: null }, last: null }
  }

  publish (message: BusMessage): Promise<Published> {
    if (this.closed) return Promise.reject(new BusClosedError())
    const { idempotencyKey, idempotencyHash } = message
    if (idempotencyKey !== undefined) {
      const first = this.firstPublish(idempotencyKey)
      if (first !== undefined && first.hash !== idempotencyHash) return Promise.reject(new IdempotencyConflictError(idempotencyKey))
      if (first !== undefined) return Promise.resolve({ id: first.id, delivered: 0 })
    }
    const position: EventPosition = { epoch: this.epoch, major: ++this.seq, minor: null }
    const id = formatEventId(position)
    if (idempotencyKey !== undefined) {
      if (this.keys.size >= MAX_IDEMPOTENCY_KEYS) this.keys.delete(this.keys.keys().next().value as string)
      this.keys.set(idempotencyKey, { id, hash: idempotencyHash, at: this.now() })
    }
    const delivered = this.deliver({ ...message, position, id })
    return Promise.resolve({ id, delivered })
  }

  /** The key's publish within the window, forgetting the keys that are past it. */
  private firstPublish (key: string): { id: string, hash: string | undefined } | undefined {
    const since = this.now() - this.idempotencyWindowMs
    for (const [oldest, { at }] of this.keys) {
      if (at > since) break
      this.keys.delete(oldest)
    }
    return this.keys.get(key)
  }

  async read (after: EventPosition): Promise<BusRead> {
    const ours = after.epoch === this.epoch && after.minor === null && after.major <= this.seq
    return { kind: 'gone', reason: ours ? 'too-old' : 'unknown' }
  }

  stats (): BusStats {
    return { kind: 'memory', state: this.closed ? 'down' : 'up', delivered: this.seq, reads: 0, lagMs: 0, discontinuities: 0, refusedPublishes: 0 }
  }

  /** In this process, every event published is delivered here. */
  receiving (): boolean {
    return !this.closed
  }

  async close (): Promise<void> {
    this.closed = true
  }
}
