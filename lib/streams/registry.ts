import { APP_CLOSE_REASONS, type AppCloseReason, type CloseReason } from '../observe/vocabulary'
import type { StreamStats } from '../observe/stats'
import type { SseClientInfo, Subscriber } from './subscriber'
import { encodeAppEvent } from '../events/encoder'
import { AppCloseReasonError, RegistryFullError, StreamAddressError } from '../errors'
import { describe } from '../shared/describe'

/** One stream (by its id, as iteration and initialEvent show it) or every stream of one key (all tabs of one user). */
export type StreamAddress = { id: string } | { key: string }

/**
 * The bounded set of open streams and their addresses. It never holds more than `capacity` and
 * never closes a live stream to make room: admission refuses instead.
 */
export class Registry {
  private readonly subscribers = new Map<string, Subscriber>()
  /** The open streams of each key: all tabs of one user, for send and close by key. */
  private readonly byKey = new Map<string, Set<Subscriber>>()

  constructor (readonly capacity: number, private readonly stats: StreamStats) {}

  get size (): number {
    return this.subscribers.size
  }

  get hasRoom (): boolean {
    return this.subscribers.size < this.capacity
  }

  /** Open streams held by `key` (see maxClientsPerKey). */
  countForKey (key: string): number {
    return this.byKey.get(key)?.size ?? 0
  }

  /** The open streams, oldest first. */
  all (): IterableIterator<Subscriber> {
    return this.subscribers.values()
  }

  /** Holds an opened stream. */
  add (subscriber: Subscriber): void {
    if (!this.hasRoom) throw new RegistryFullError()
    this.subscribers.set(subscriber.id, subscriber)
    const tabs = this.byKey.get(subscriber.key)
    if (tabs === undefined) this.byKey.set(subscriber.key, new Set([subscriber]))
    else tabs.add(subscriber)
    this.stats.accepted(this.subscribers.size)
  }

  /** Called once per stream when it is over, whoever ended it. */
  readonly remove = (subscriber: Subscriber, reason: CloseReason): void => {
    if (!this.subscribers.delete(subscriber.id)) return
    const tabs = this.byKey.get(subscriber.key)
    tabs?.delete(subscriber)
    if (tabs?.size === 0) this.byKey.delete(subscriber.key)
    this.stats.closed(reason, subscriber.bytesQueued)
  }

  /**
   * Sends one event to the streams addressed (not through the bus: this instance's streams only,
   * no id, not in history, so never replayed); returns how many took it.
   */
  send (to: StreamAddress, data: unknown, options: { event?: string } = {}): number {
    const frame = encodeAppEvent({ event: options.event, data })
    let sent = 0
    for (const subscriber of this.addressed(to)) if (subscriber.write(frame)) sent++
    return sent
  }

  /** Ends the streams addressed, each with its own jittered `retry:`, counted under `reason`; returns how many. */
  close (to: StreamAddress, reason: AppCloseReason): number {
    if (!(APP_CLOSE_REASONS as readonly unknown[]).includes(reason)) throw new AppCloseReasonError(APP_CLOSE_REASONS.join(' or '), String(reason))
    const subscribers = [...this.addressed(to)]
    for (const subscriber of subscribers) subscriber.end(reason)
    return subscribers.length
  }

  /** Frame bytes queued on the streams still open. */
  openStreamBytes (): number {
    let bytes = 0
    for (const subscriber of this.subscribers.values()) bytes += subscriber.bytesQueued
    return bytes
  }

  /** What the app may know of the open streams, oldest first. */
  * info (): IterableIterator<SseClientInfo> {
    for (const { id, connectedAt, expiresAt, remoteAddress, key, topics } of this.subscribers.values()) {
      yield { id, connectedAt, expiresAt, remoteAddress, key, topics }
    }
  }

  private addressed (to: StreamAddress): Iterable<Subscriber> {
    if (typeof to !== 'object' || to === null) throw new StreamAddressError(describe(to))
    if ('id' in to && typeof to.id === 'string') {
      const subscriber = this.subscribers.get(to.id)
      return subscriber === undefined ? [] : [subscriber]
    }
    if ('key' in to && typeof to.key === 'string') return this.byKey.get(to.key) ?? []
    throw new StreamAddressError(describe(to))
  }
}
