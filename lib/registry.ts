import type { ActivityLog, ActivityCounts, AdmissionGauges, ResumeOutcome } from './activity-log'
import type { RefusalReason } from './admission'
import type { ClientStream, CloseReason } from './client-stream'
import { encodeEvent, HEARTBEAT_FRAME } from './encoder'
import { BroadcastTopicError, RegistryFullError } from './errors'
import { formatEventId, newEpoch, type ParsedEventId } from './event-id'
import { History } from './history'
import type { RandomSource } from './jitter'
import type { SseClientInfo } from './options'
import { isValidTopic } from './subscription'

/** Drain batches are this far apart (fewer batches when there are fewer clients). */
const DRAIN_STEP_MS = 50

export interface BroadcastOptions {
  /** The `event:` field; omitted means a plain `message`. */
  event?: string
  /** Only clients that subscribed to this topic (or to every event) receive it. */
  topic?: string
}

export interface SseStats extends ActivityCounts, AdmissionGauges {
  current: number
  peak: number
  capacity: number
  /** Broadcasts made so far, and how many of them history still holds for replay. */
  events: number
  historyEvents: number
  historyBytes: number
  /** `rejected`, by reason. */
  refusals: Record<RefusalReason, number>
  /** `accepted`, by how the stream started. */
  resumes: Record<ResumeOutcome, number>
  /** Events sent from history to resuming clients. */
  replayedEvents: number
  /** broadcast() calls. */
  broadcasts: number
  /** Frame bytes queued on streams (retry, events, heartbeats, replays; not headers, not refusals). */
  bytesSent: number
}

/** Starts timing one broadcast; the function it returns ends it. */
export type BroadcastTimer = () => () => void

export interface RegistryLimits {
  capacity: number
  historyMaxEvents: number
  historyMaxBytes: number
}

/**
 * The bounded set of open streams, decorated as `fastify.sse`. It never holds more than
 * `capacity` and never closes a live client to make room: admission refuses instead.
 */
export class SseRegistry implements Iterable<SseClientInfo> {
  readonly capacity: number
  private readonly clients = new Map<string, ClientStream>()
  private readonly perKey = new Map<string, number>()
  private readonly history: History
  private readonly epoch = newEpoch()
  private peakSize = 0
  private broadcastTimer: BroadcastTimer | null = null

  constructor (limits: RegistryLimits, private readonly activity: ActivityLog) {
    this.capacity = limits.capacity
    this.history = new History(limits.historyMaxEvents, limits.historyMaxBytes)
  }

  get size (): number {
    return this.clients.size
  }

  get hasRoom (): boolean {
    return this.clients.size < this.capacity
  }

  /** Open streams held by `key` (see maxClientsPerKey). */
  countForKey (key: string): number {
    return this.perKey.get(key) ?? 0
  }

  /** The id of the newest broadcast, or null before the first. */
  get lastEventId (): string | null {
    return this.history.lastSeq === 0 ? null : formatEventId(this.epoch, this.history.lastSeq)
  }

  /** The id the next broadcast will get: read it just before broadcasting to put the id in the data too. */
  get nextEventId (): string {
    return formatEventId(this.epoch, this.history.nextSeq)
  }

  /**
   * Admits an opened stream and, if it resumes from `lastEventId`, queues what it missed — in the
   * same tick, so no broadcast can fall between replay and live events.
   */
  add (client: ClientStream, lastEventId: ParsedEventId | null): void {
    if (!this.hasRoom) throw new RegistryFullError()
    this.clients.set(client.id, client)
    this.perKey.set(client.key, this.countForKey(client.key) + 1)
    if (this.clients.size > this.peakSize) this.peakSize = this.clients.size
    this.activity.count('accepted')
    this.activity.observeSize(this.clients.size)
    if (lastEventId !== null) this.resume(client, lastEventId)
    else this.activity.resumed('fresh', 0)
  }

  private resume (client: ClientStream, from: ParsedEventId): void {
    const result = from.epoch === this.epoch ? this.history.since(from.seq) : { kind: 'resync', reason: 'unknown' } as const
    if (result.kind === 'replay') {
      let replayed = 0
      for (const entry of result.entries) {
        if (!client.wants(entry.topic)) continue
        if (!client.write(entry.frame)) break
        replayed++
      }
      this.activity.resumed('replayed', replayed)
      return
    }
    this.activity.resumed('resync', 0)
    // Too far behind (or not one of our ids): say so, rather than leave a silent gap. The id moves
    // the client's Last-Event-ID to now, so its next reconnect resumes from here.
    const latest = this.lastEventId
    client.write(encodeEvent({ event: 'resync', id: latest ?? undefined, data: { reason: result.reason, lastEventId: latest } }))
  }

  /** Called once per client when its stream is over, whoever ended it. */
  readonly remove = (client: ClientStream, reason: CloseReason): void => {
    if (!this.clients.delete(client.id)) return
    const left = this.countForKey(client.key) - 1
    if (left > 0) this.perKey.set(client.key, left)
    else this.perKey.delete(client.key)
    this.activity.count(reason)
    this.activity.closedStreamBytes += client.bytesQueued
  }

  /** Times every broadcast from now on (set only when metrics are on: no cost otherwise). */
  timeBroadcasts (timer: BroadcastTimer): void {
    this.broadcastTimer = timer
  }

  /**
   * Sends one event to every open stream that wants it: given the next id, encoded once into a
   * Buffer that history and every client share, queued without waiting on any client.
   * Returns how many clients it was queued for.
   */
  broadcast (data: unknown, options: BroadcastOptions = {}): number {
    const { event, topic } = options
    if (topic !== undefined && !isValidTopic(topic)) {
      throw new BroadcastTopicError(JSON.stringify(topic))
    }
    const timed = this.broadcastTimer?.()
    const frame = encodeEvent({ data, event, id: formatEventId(this.epoch, this.history.nextSeq) })
    this.history.push(frame, topic)
    let delivered = 0
    for (const client of this.clients.values()) {
      if (client.wants(topic) && client.write(frame)) delivered++
    }
    this.activity.broadcasts++
    timed?.()
    return delivered
  }

  /** One heartbeat for everyone: a comment frame, skipping backpressured clients, sweeping dead ones. */
  heartbeat (): void {
    for (const client of this.clients.values()) client.heartbeat(HEARTBEAT_FRAME)
  }

  /**
   * Staged drain for shutdown: every client gets its own `retry:` and the streams end in shuffled
   * batches spread over `drainMs`, so a restart does not bring every client back in one second.
   * Resolves when the last batch has ended.
   */
  drain (drainMs: number, retryFrame: () => Buffer, random: RandomSource): Promise<void> {
    const clients = [...this.clients.values()]
    for (let i = clients.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1))
      ;[clients[i], clients[j]] = [clients[j], clients[i]]
    }
    const batches = Math.max(1, Math.min(clients.length, Math.floor(drainMs / DRAIN_STEP_MS)))
    let batch = 0
    return new Promise((resolve) => {
      const step = (): void => {
        const from = Math.floor(batch * clients.length / batches)
        const to = Math.floor((batch + 1) * clients.length / batches)
        for (const client of clients.slice(from, to)) {
          client.write(retryFrame())
          client.end('shutdown')
        }
        if (++batch < batches) setTimeout(step, drainMs / batches)
        else resolve()
      }
      step()
    })
  }

  /** Frame bytes queued on every stream so far, open or closed. */
  get bytesSent (): number {
    let bytes = this.activity.closedStreamBytes
    for (const client of this.clients.values()) bytes += client.bytesQueued
    return bytes
  }

  stats (): SseStats {
    const { refusals, resumes, replayedEvents, broadcasts } = this.activity
    return {
      current: this.clients.size,
      peak: this.peakSize,
      capacity: this.capacity,
      ...this.activity.totals,
      events: this.history.lastSeq,
      historyEvents: this.history.size,
      historyBytes: this.history.byteLength,
      refusals: { ...refusals },
      resumes: { ...resumes },
      replayedEvents,
      broadcasts,
      bytesSent: this.bytesSent,
      ...this.activity.admissionGauges()
    }
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
