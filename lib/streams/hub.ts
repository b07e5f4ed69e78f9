import type { AppCloseReason, SseStats } from '../observe/vocabulary'
import type { SseClientInfo } from './subscriber'
import type { Registry, StreamAddress } from './registry'
import type { FanOut } from './fan-out'
import { broadcast, type BroadcastOptions, type BroadcastResult } from './broadcast'
import type { StreamStats } from '../observe/stats'

/**
 * `fastify.sse`: what an application may do with tower-sse's streams. The registry and fan-out
 * behind it stay the plugin's own.
 */
export interface SseHub extends Iterable<SseClientInfo> {
  /**
   * Sends one event to every stream that wants it, on every instance sharing the bus. Resolves
   * with the id the bus assigned and how many streams of this instance it was queued for; with
   * the memory bus the frames are written before it returns. Rejects (`TOWER_SSE_BUS_UNAVAILABLE`)
   * when the bus cannot take the event: nothing is queued for later.
   */
  broadcast: (data: unknown, options?: BroadcastOptions) => Promise<BroadcastResult>
  /**
   * Sends one event to one stream (`{ id }`) or to every stream of a key (`{ key }`: all tabs of
   * one user) on this instance, now; returns how many took it. It has no id and is not kept in
   * history: a reconnect does not replay it (broadcast to a topic for that).
   */
  send: (to: StreamAddress, data: unknown, options?: { event?: string }) => number
  /**
   * Ends one stream or every stream of a key on this instance, each with its own jittered `retry:`,
   * counted as `revoked` or `logout` (stats(), the summary log, the metrics); returns how many.
   * A client that reconnects meets your auth again.
   */
  close: (to: StreamAddress, reason: AppCloseReason) => number
  /**
   * Stops a resumable stream's producer, wherever it runs, and ends every connection following it
   * (`event: end`, `{ "reason": "cancelled" }`); resolves false when it had already ended or never was.
   */
  cancel: (resumableId: string) => Promise<boolean>
  /** Open streams on this instance. */
  readonly size: number
  readonly capacity: number
  /** Whether one more stream would be admitted by capacity alone. */
  readonly hasRoom: boolean
  /** The id of the newest event delivered here, or null before the first. */
  readonly lastEventId: string | null
  stats: () => SseStats
}

/** The public face of one registration: a frozen object holding no reference a user could reach past. */
export function createHub (registry: Registry, fanOut: FanOut, cancel: SseHub['cancel'], counts: StreamStats, stats: () => SseStats): SseHub {
  return Object.freeze({
    broadcast: (data: unknown, options?: BroadcastOptions) => broadcast(fanOut.bus, counts, data, options),
    send: (to: StreamAddress, data: unknown, options?: { event?: string }) => registry.send(to, data, options),
    close: (to: StreamAddress, reason: AppCloseReason) => registry.close(to, reason),
    cancel,
    get size () { return registry.size },
    get capacity () { return registry.capacity },
    get hasRoom () { return registry.hasRoom },
    get lastEventId () { return fanOut.lastEventId },
    stats,
    [Symbol.iterator]: () => registry.info()
  })
}
