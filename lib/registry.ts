import type { ActivityLog, ActivityCounts } from './activity-log'
import type { ClientStream, CloseReason } from './client-stream'
import { encodeEvent, HEARTBEAT_FRAME } from './encoder'
import type { SseClientInfo } from './options'

export interface BroadcastOptions {
  /** The `event:` field; omitted means a plain `message`. */
  event?: string
}

export interface SseStats extends ActivityCounts {
  current: number
  peak: number
  capacity: number
}

/**
 * The bounded set of open streams, decorated as `fastify.sse`. It never holds more than
 * `capacity` and never closes a live client to make room: admission refuses instead.
 */
export class SseRegistry implements Iterable<SseClientInfo> {
  private readonly clients = new Map<string, ClientStream>()
  private peakSize = 0

  constructor (readonly capacity: number, private readonly activity: ActivityLog) {}

  get size (): number {
    return this.clients.size
  }

  get hasRoom (): boolean {
    return this.clients.size < this.capacity
  }

  /** Admits an opened stream; the caller has checked `hasRoom` in the same tick. */
  add (client: ClientStream): void {
    if (!this.hasRoom) throw new Error('tower-sse: registry is full; admission must refuse before add()')
    this.clients.set(client.id, client)
    if (this.clients.size > this.peakSize) this.peakSize = this.clients.size
    this.activity.count('accepted')
    this.activity.observeSize(this.clients.size)
  }

  /** Called once per client when its stream is over, whoever ended it. */
  readonly remove = (client: ClientStream, reason: CloseReason): void => {
    if (this.clients.delete(client.id)) this.activity.count(reason)
  }

  /**
   * Sends one event to every open stream: encoded once, written to each without waiting.
   * Returns how many clients it was queued for.
   */
  broadcast (data: unknown, options: BroadcastOptions = {}): number {
    const frame = encodeEvent({ data, event: options.event })
    let delivered = 0
    for (const client of this.clients.values()) {
      if (client.write(frame)) delivered++
    }
    return delivered
  }

  /** One heartbeat for everyone: a comment frame, skipping backpressured clients, sweeping dead ones. */
  heartbeat (): void {
    for (const client of this.clients.values()) client.heartbeat(HEARTBEAT_FRAME)
  }

  /** Ends every stream from the server side (shutdown). */
  endAll (reason: CloseReason): void {
    for (const client of [...this.clients.values()]) client.end(reason)
  }

  stats (): SseStats {
    return { current: this.clients.size, peak: this.peakSize, capacity: this.capacity, ...this.activity.totals }
  }

  /** Open streams, oldest first. */
  * clientsInfo (): IterableIterator<SseClientInfo> {
    for (const { id, connectedAt, expiresAt, remoteAddress } of this.clients.values()) {
      yield { id, connectedAt, expiresAt, remoteAddress }
    }
  }

  [Symbol.iterator] (): IterableIterator<SseClientInfo> {
    return this.clientsInfo()
  }
}
