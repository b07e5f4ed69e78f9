import { createHash } from 'node:crypto'
import type { Bus, BusEvent, Published } from '../bus/bus'
import { APP_CLOSE_REASONS, type AppCloseReason, type CloseReason, type StreamGauges } from '../observe/vocabulary'
import type { StreamStats } from '../observe/stats'
import type { Subscriber } from './subscriber'
import { checkField, dataText, encodeEvent, encodeText, HEARTBEAT_FRAME } from '../events/encoder'
import { BroadcastIdempotencyKeyError, BroadcastIdPropertyError, IdempotencyConflictError, RegistryFullError } from '../errors'
import { formatEventId, type EventPosition, type ParsedEventId } from '../bus/event-id'
import { History, type HistoryEntry } from '../events/history'
import type { RandomSource } from '../shared/jitter'
import type { SseClientInfo } from '../options'
import { Resumes } from '../events/resume'
import { inSlices } from '../shared/slices'
import { ALL_TOPICS, checkTopic } from '../events/topic'

/** Drain batches are this far apart (fewer batches when there are fewer clients). */
const DRAIN_STEP_MS = 50
/** Streams a heartbeat sweeps per turn of the event loop: a sweep over tens of thousands yields to I/O between slices instead of holding the loop through all of them. */
const HEARTBEAT_SLICE = 500

const ID_PROPERTY = /^[A-Za-z_$][A-Za-z0-9_$]{0,63}$/
/** What an idempotency key may hold: a UUID, a ULID, base64 or a producer's own counter. */
export const IDEMPOTENCY_KEY = /^[A-Za-z0-9_.:+/=-]{1,128}$/

export interface BroadcastOptions {
  /** The `event:` field; omitted means a plain `message`. */
  event?: string
  /** Only streams granted this topic (or ALL_TOPICS) receive it; without one, every stream does. */
  topic?: string
  /**
   * Put the event's id into the data under this property (data must be a plain object without
   * it): the id is assigned by the bus, so this is how the data can carry the same id as `id:`.
   */
  idProperty?: string
  /**
   * A retry with the same key within idempotencyWindowMs publishes nothing new and resolves with
   * the first publish's id: retrying after TOWER_SSE_PUBLISH_UNKNOWN (or any 503) is then safe.
   * The same key with another event rejects with TOWER_SSE_IDEMPOTENCY_CONFLICT.
   */
  idempotencyKey?: string
  /**
   * Whose key it is (a producer's name, or a hash of its credential): keys of different scopes
   * never collide. Stored hashed, never as given.
   */
  idempotencyScope?: string
}

/** One stream (by its id, as iteration and initialEvent show it) or every stream of one key (all tabs of one user). */
export type StreamAddress = { id: string } | { key: string }

/** What broadcast() resolves with. */
export type BroadcastResult = Published

/** Takes the time one event's fan-out took here, in seconds. */
export type BroadcastObserver = (seconds: number) => void

export interface RegistryLimits {
  capacity: number
  historyMaxEvents: number
  historyMaxBytes: number
}

/**
 * The bounded set of open streams. It never holds more than `capacity` and never closes a live
 * client to make room: admission refuses instead. Broadcasts go through the bus; what the bus
 * delivers is encoded once and fanned out here. Only `SseHub` (streams/hub.ts) is public.
 */
export class SseRegistry {
  readonly capacity: number
  private readonly clients = new Map<string, Subscriber>()
  /** The open streams of each key: all tabs of one user, for sendToKey and closeKey. */
  private readonly perKey = new Map<string, Set<Subscriber>>()
  history: History
  private readonly resumes: Resumes
  private last: { id: string, position: EventPosition } | null = null
  private observeBroadcast: BroadcastObserver | null = null
  /** Draws the jittered `retry:` of a stream the registry ends itself. */
  private retryFrame: () => Buffer = () => Buffer.alloc(0)
  /** Cancels the heartbeat sweep under way (null: none is). */
  private cancelSweep: (() => void) | null = null

  constructor (private readonly limits: RegistryLimits, private readonly stats: StreamStats, readonly bus: Bus, random: RandomSource) {
    this.capacity = limits.capacity
    this.history = new History(limits.historyMaxEvents, limits.historyMaxBytes, null)
    this.resumes = new Resumes(this, stats, random)
  }

  /**
   * Subscribes to the bus: from then on every event it delivers is fanned out here. `retryFrame`
   * draws the `retry:` of a stream the registry ends while the bus is deaf.
   */
  async start (retryFrame: () => Buffer = () => Buffer.alloc(0)): Promise<void> {
    this.retryFrame = retryFrame
    const from = await this.bus.subscribe((event) => this.deliver(event), (at, reason) => this.lost(at, reason), () => this.deafened(retryFrame))
    this.history = new History(this.limits.historyMaxEvents, this.limits.historyMaxBytes, from.floor)
    this.last ??= from.last
  }

  get size (): number {
    return this.clients.size
  }

  get hasRoom (): boolean {
    return this.clients.size < this.capacity
  }

  get receiving (): boolean {
    return this.bus.receiving()
  }

  /** Open streams held by `key` (see maxClientsPerKey). */
  countForKey (key: string): number {
    return this.perKey.get(key)?.size ?? 0
  }

  /** The id of the newest event delivered here, or null before the first. */
  get lastEventId (): string | null {
    return this.last === null ? null : this.last.id
  }

  lastPosition (): EventPosition | null {
    return this.last === null ? null : this.last.position
  }

  /**
   * Admits an opened stream and, if it resumes from `lastEventId`, replays what it missed: from
   * the ring in the same tick, or after one shared bus read with its live events held meanwhile.
   */
  add (client: Subscriber, lastEventId: ParsedEventId | null): void {
    if (!this.hasRoom) throw new RegistryFullError()
    this.clients.set(client.id, client)
    const tabs = this.perKey.get(client.key)
    if (tabs === undefined) this.perKey.set(client.key, new Set([client]))
    else tabs.add(client)
    this.stats.accepted(this.clients.size)
    if (lastEventId !== null) this.resumes.start(client, lastEventId)
    else this.stats.resumed('fresh', 0)
  }

  /**
   * `event: resync` for `client`, carrying the newest id it is entitled to: that of the newest
   * event in the ring it would have been sent (ids count every event, so the newest id of all
   * would tell it how much other topics carried). None in the ring: no id, and the client keeps
   * its own, so its next resume is told again rather than skip a gap.
   */
  resyncFrame (reason: string, client: Subscriber): Buffer {
    return this.resyncFrames(reason)(client)
  }

  /** resyncFrame() for many clients at once: each distinct frame is encoded once. */
  private resyncFrames (reason: string): (client: Subscriber) => Buffer {
    const frames = new Map<string | null, Buffer>()
    return (client) => {
      const latest = client.grant === ALL_TOPICS ? this.lastEventId : idOf(this.history.newest((topic) => client.wants(topic)))
      let frame = frames.get(latest)
      if (frame === undefined) {
        frame = encodeEvent({ event: 'resync', id: latest ?? undefined, data: { reason, lastEventId: latest } })
        frames.set(latest, frame)
      }
      return frame
    }
  }

  /** Called once per client when its stream is over, whoever ended it. */
  readonly remove = (client: Subscriber, reason: CloseReason): void => {
    if (!this.clients.delete(client.id)) return
    this.resumes.forget(client)
    const tabs = this.perKey.get(client.key)
    tabs?.delete(client)
    if (tabs?.size === 0) this.perKey.delete(client.key)
    this.stats.closed(reason, client.bytesQueued)
  }

  /**
   * Times every event's fan-out from now on (set only when metrics are on: no cost otherwise): two
   * clock reads and one call per event, nothing per stream and nothing allocated.
   */
  timeBroadcasts (observe: BroadcastObserver): void {
    this.observeBroadcast = observe
  }

  /**
   * Publishes one event through the bus. Everything is checked here, before the bus has it, so no
   * instance can fail to encode it later. Resolves with the id the bus assigned and how many
   * streams of this instance it was queued for (memory bus: already resolved, frames written).
   */
  broadcast (data: unknown, options: BroadcastOptions = {}): Promise<BroadcastResult> {
    const { event, topic, idProperty, idempotencyKey, idempotencyScope } = options
    try {
      if (idempotencyKey !== undefined && (typeof idempotencyKey !== 'string' || !IDEMPOTENCY_KEY.test(idempotencyKey))) {
        throw new BroadcastIdempotencyKeyError(JSON.stringify(idempotencyKey))
      }
      if (topic !== undefined) checkTopic(topic)
      if (event !== undefined) checkField('event', event)
      const text = dataText(data)
      if (idProperty !== undefined) checkIdProperty(idProperty, data, text)
      if (idempotencyKey === undefined) {
        return this.bus.publish({ data: text, event, topic, idProperty }).then((published) => this.published(published))
      }
      const message = { data: text, event, topic, idProperty, ...scopedIdempotency(idempotencyKey, idempotencyScope, [text, event, topic, idProperty]) }
      return this.bus.publish(message).then((published) => this.published(published), (error: unknown) => {
        // The bus names the scoped key; the caller knows only its own.
        throw error instanceof IdempotencyConflictError ? new IdempotencyConflictError(JSON.stringify(idempotencyKey)) : error
      })
    } catch (error) {
      return Promise.reject(error)
    }
  }

  private published (published: Published): Published {
    this.stats.broadcast()
    return published
  }

  /**
   * The bus's one delivery callback: encodes the event once into a Buffer that history and every
   * client share and queues it without waiting on any client. Returns how many took it.
   */
  private deliver (event: BusEvent): number {
    const observe = this.observeBroadcast
    const started = observe === null ? 0 : performance.now()
    const entry = this.frameOf(event)
    this.history.push(entry)
    this.last = event
    const { topic, frame } = entry
    let delivered = 0
    for (const client of this.clients.values()) {
      if (this.resumes.active && this.resumes.intercept(client, entry)) continue
      if (client.wants(topic) && client.write(frame)) delivered++
    }
    this.stats.delivered()
    if (observe !== null) observe((performance.now() - started) / 1000)
    return delivered
  }

  /**
   * The bus cannot vouch for continuity up to `at` (events were lost, trimmed past this instance,
   * or rolled back): every stream here gets a resync carrying `at`, the ring restarts there, and
   * resumes under way end in that resync too — but for those whose id is past `at` or that start
   * again from their own id: a resync would move them back.
   */
  private lost (at: { id: string, position: EventPosition }, reason: string): void {
    this.history = new History(this.limits.historyMaxEvents, this.limits.historyMaxBytes, at.position)
    this.last = at
    const frame = this.resyncFrames(reason)
    for (const client of this.clients.values()) {
      if (this.resumes.survives(client, at.position)) continue
      this.resumes.forget(client)
      client.write(frame(client))
    }
  }

  /**
   * This instance cannot prove it receives from the bus: every stream gets a resync (what it has
   * seen may not be all there is), its own jittered `retry:`, and ends, so its client reconnects —
   * to a healthy instance behind a load balancer that reads the readiness of each, or here again,
   * resuming from its id, once the bus is back. Never a stream left silent.
   */
  private deafened (retryFrame: () => Buffer): void {
    const frame = this.resyncFrames('bus-deaf')
    for (const client of [...this.clients.values()]) {
      this.resumes.forget(client)
      client.write(frame(client))
      client.write(retryFrame())
      client.end('busDeaf')
    }
  }

  frameOf (event: BusEvent): HistoryEntry {
    const text = event.idProperty === undefined ? event.data : withId(event.data, event.idProperty, event.id)
    return { position: event.position, topic: event.topic, frame: encodeText(text, event.event, event.id) }
  }

  /**
   * One heartbeat for everyone: a comment frame, skipping backpressured clients, sweeping dead
   * ones. In slices of HEARTBEAT_SLICE streams a turn: in one pass, 19,000 streams held the event
   * loop 224 ms (bench:scale, event-loop delay p99), and every request waited behind it. A sweep
   * still under way when the next beat comes is left to finish.
   */
  heartbeat (): void {
    if (this.cancelSweep !== null) return
    this.cancelSweep = inSlices([...this.clients.values()], HEARTBEAT_SLICE, (client) => client.heartbeat(HEARTBEAT_FRAME), () => { this.cancelSweep = null })
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

  /** What the registry holds now, for stats(). */
  gauges (): StreamGauges {
    let openStreamBytes = 0
    for (const client of this.clients.values()) openStreamBytes += client.bytesQueued
    return {
      current: this.clients.size,
      capacity: this.capacity,
      historyEvents: this.history.size,
      historyBytes: this.history.byteLength,
      openStreamBytes,
      bus: this.bus.stats()
    }
  }

  /** Open streams, oldest first. */
  * clientsInfo (): IterableIterator<SseClientInfo> {
    for (const { id, connectedAt, expiresAt, remoteAddress, key, topics } of this.clients.values()) {
      yield { id, connectedAt, expiresAt, remoteAddress, key, topics }
    }
  }

  /**
   * Sends one event to the streams addressed (not through the bus: this instance's streams only,
   * no id, not in history, so never replayed); returns how many took it.
   */
  sendTo (to: StreamAddress, data: unknown, options: { event?: string } = {}): number {
    if (options.event !== undefined) checkField('event', options.event)
    const frame = encodeEvent({ event: options.event, data })
    let sent = 0
    for (const client of this.addressed(to)) if (client.write(frame)) sent++
    return sent
  }

  /** Ends the streams addressed, each with its own jittered `retry:`, counted under `reason`; returns how many. */
  closeStreams (to: StreamAddress, reason: AppCloseReason): number {
    if (!(APP_CLOSE_REASONS as readonly string[]).includes(reason)) {
      throw new TypeError(`tower-sse: a stream is closed as ${APP_CLOSE_REASONS.join(' or ')}, got ${String(reason)}`)
    }
    const clients = [...this.addressed(to)]
    for (const client of clients) {
      client.write(this.retryFrame())
      client.end(reason)
    }
    return clients.length
  }

  private addressed (to: StreamAddress): Iterable<Subscriber> {
    if ('id' in to) {
      const client = this.clients.get(to.id)
      return client === undefined ? [] : [client]
    }
    return this.perKey.get(to.key) ?? []
  }

  /** Stops the bus and any resume still waiting on it; the streams are drained separately. */
  async close (): Promise<void> {
    this.cancelSweep?.()
    this.cancelSweep = null
    this.resumes.close()
    await this.bus.close()
  }
}

function sha256Hex (text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 32)
}

/**
 * The key as the bus stores it and the hash of the event it stands for. A scope is hashed and set
 * apart by `#`, which no key holds, so no two (scope, key) pairs share a stored key.
 */
function scopedIdempotency (key: string, scope: string | undefined, event: unknown[]): { idempotencyKey: string, idempotencyHash: string } {
  return {
    idempotencyKey: scope === undefined ? key : `${sha256Hex(scope)}#${key}`,
    idempotencyHash: sha256Hex(JSON.stringify(event))
  }
}

function idOf (entry: HistoryEntry | undefined): string | null {
  return entry === undefined ? null : formatEventId(entry.position)
}

function checkIdProperty (name: string, data: unknown, text: string): void {
  if (!ID_PROPERTY.test(name)) {
    throw new BroadcastIdPropertyError(`must be an identifier of at most 64 characters, got ${JSON.stringify(name)}`)
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data) || !text.startsWith('{')) {
    throw new BroadcastIdPropertyError('needs data that is a plain object')
  }
  // Read from what is encoded, not from the object: a toJSON() could add the name, and a client's
  // JSON.parse would then take the last of the two.
  if (Object.hasOwn(JSON.parse(text) as object, name)) {
    throw new BroadcastIdPropertyError(`would set ${JSON.stringify(name)}, which the data already has`)
  }
}

/** `{"<name>":"<id>", …rest of the object}`: the JSON text of the data with the id first. */
function withId (text: string, name: string, id: string): string {
  const head = `{${JSON.stringify(name)}:${JSON.stringify(id)}`
  return text === '{}' ? `${head}}` : `${head},${text.slice(1)}`
}
