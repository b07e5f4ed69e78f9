import { comparePositions, formatEventId, type EventPosition } from '../event-id'
import { BusClosedError, BusUnavailableError, IdempotencyConflictError, PublishOutcomeUnknownError } from '../../errors'
import type { Published } from '../bus'
import { positionOf } from './entry-codec'

/** What the script answered a publish: too late (nothing written), the idempotency key's first publish, its key used for another event, or published. */
export type PublishReply = [kind: 'late'] | [kind: 'dup', id: string] | [kind: 'conflict'] | [kind: 'ok', epoch: string, id: string, seq: string]

interface Waiter {
  resolve: (published: Published) => void
  reject: (error: Error) => void
  /** Where Redis put it (null until the script answered). */
  position: EventPosition | null
  timer: NodeJS.Timeout
}

/** How a publish ended; `settle` alone turns it into what publish() resolves or rejects with. */
type End =
  /** The reader delivered it to `count` streams here. */
  | { kind: 'delivered', id: string, count: number }
  /** Redis has it but it is not delivered here (a resync passed it, its epoch was left, the bus closed): published. */
  | { kind: 'passed', id?: string }
  /** The idempotency key's first publish has `id`. */
  | { kind: 'duplicate', id: string }
  /** The idempotency key's first publish was another event: nothing written. */
  | { kind: 'conflict' }
  /** The script ran past the publish's deadline and wrote nothing. */
  | { kind: 'late' }
  /** Redis answered with an error: the script did not publish. */
  | { kind: 'refused', message: string }
  /** The deadline passed, or the connection was lost, with no word from Redis: maybe published. */
  | { kind: 'unknown' }
  /** The bus closed before Redis answered. */
  | { kind: 'closed' }

/**
 * The publishes awaiting their outcome, by token (the `o` field of their entry). A publish settles
 * once: when the reader delivers its entry, when Redis refuses it, when a resync or an epoch change
 * passes it, or at its deadline; every one of those ends in `settle`, the one place that decides
 * what publish() tells its caller.
 */
export class PublishWaiters {
  private readonly waiting = new Map<string, Waiter>()

  constructor (private readonly timeoutMs: number) {}

  get size (): number {
    return this.waiting.size
  }

  /** Waits for publish `token`, registered before the script runs: the reader may deliver the event before its reply arrives. */
  wait (token: string): Promise<Published> {
    return new Promise<Published>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        position: null,
        timer: setTimeout(() => this.settle(token, waiter, waiter.position === null ? { kind: 'unknown' } : { kind: 'passed' }), this.timeoutMs)
      }
      this.waiting.set(token, waiter)
    })
  }

  /** The script answered publish `token`. */
  answered (token: string, reply: PublishReply): void {
    const waiter = this.waiting.get(token)
    if (waiter === undefined) return
    if (reply[0] === 'ok') {
      // Delivered by the reader, or (below what it delivered: a rollback) settled by its check.
      waiter.position = positionOf(reply[1], reply[2])
      return
    }
    this.settle(token, waiter, reply[0] === 'dup' ? { kind: 'duplicate', id: reply[1] } : { kind: reply[0] })
  }

  /** The script call for publish `token` failed: an error Redis sent means it did not publish; a lost connection leaves it unknown. */
  failed (token: string, error: Error): void {
    const waiter = this.waiting.get(token)
    if (waiter === undefined) return
    this.settle(token, waiter, error.name === 'ReplyError' ? { kind: 'refused', message: error.message } : { kind: 'unknown' })
  }

  /** The reader delivered publish `token`'s entry `id` to `count` streams. */
  delivered (token: string | undefined, id: string, count: number): void {
    const waiter = token === undefined ? undefined : this.waiting.get(token)
    if (waiter !== undefined) this.settle(token as string, waiter, { kind: 'delivered', id, count })
  }

  /** The reader passed publish `token`'s entry `id` without delivering it (it resynced there). */
  passed (token: string | undefined, id: string): void {
    const waiter = token === undefined ? undefined : this.waiting.get(token)
    if (waiter !== undefined) this.settle(token as string, waiter, { kind: 'passed', id })
  }

  /** Every stream here resynced at `at`: publishes of its epoch up to it will not be delivered. */
  passedUpTo (at: EventPosition): void {
    for (const [token, waiter] of this.waiting) {
      const position = waiter.position
      if (position !== null && position.epoch === at.epoch && comparePositions(position, at) <= 0) this.settle(token, waiter, { kind: 'passed' })
    }
  }

  /** The reader follows `epoch` now: publishes of the epoch left behind are in Redis but will never be delivered here. */
  leftFor (epoch: string): void {
    for (const [token, waiter] of this.waiting) {
      if (waiter.position !== null && waiter.position.epoch !== epoch) this.settle(token, waiter, { kind: 'passed' })
    }
  }

  /** The bus closed: what Redis has is published, just not delivered here any more; the rest is refused. */
  close (): void {
    for (const [token, waiter] of this.waiting) this.settle(token, waiter, waiter.position === null ? { kind: 'closed' } : { kind: 'passed' })
  }

  private settle (token: string, waiter: Waiter, end: End): void {
    clearTimeout(waiter.timer)
    this.waiting.delete(token)
    switch (end.kind) {
      case 'delivered': return waiter.resolve({ id: end.id, delivered: end.count })
      case 'passed': return waiter.resolve({ id: end.id ?? formatEventId(waiter.position as EventPosition), delivered: 0 })
      case 'duplicate': return waiter.resolve({ id: end.id, delivered: 0 })
      // The registry names the caller's key; the scoped one is not the caller's to see.
      case 'conflict': return waiter.reject(new IdempotencyConflictError('of this publish'))
      case 'late': return waiter.reject(new BusUnavailableError('Redis ran the publish after its deadline and refused it'))
      case 'refused': return waiter.reject(new BusUnavailableError(end.message))
      case 'unknown': return waiter.reject(new PublishOutcomeUnknownError(this.timeoutMs))
      case 'closed': return waiter.reject(new BusClosedError())
    }
  }
}
