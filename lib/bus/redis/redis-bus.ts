import { randomBytes, randomFillSync } from 'node:crypto'
import type { Redis, RedisOptions } from 'ioredis'
import { backoffDelayMs } from '../../client/policy'
import { createRedisConnection, DISCONNECT_TIMEOUT_MS, RESTART_ATTEMPT, restartWhenEnded } from './connection'
import { redactRedisUrl } from './url'
import { formatEventId, type EventPosition } from '../../events/event-id'
import { BusBusyError, BusClosedError, BusEvictableError, BusStartError, BusUnavailableError, PublishOutcomeUnknownError } from '../../errors'
import type { Bus, BusEvent, BusMessage, BusRead, BusStats, Deaf, Deliver, Lost, Published, StartPoint } from '../bus'
import { BUS_SCRIPT } from './script'
import { PublishBatch } from './publish-batch'
import { DEFAULTS } from '../../options'
import { ReceiveProof } from './receive-proof'
import { describeRefusals, explainStartFailure, firstReady } from './start-up'
import { monotonicNow } from '../../shared/monotonic'

export interface RedisBusOptions {
  /** A redis://, rediss:// or redis+sentinel:// URL (the bus owns its connections), or an ioredis client (the app owns it). */
  redis: string | Redis
  /** Keys used: `<key>:stream`, `<key>:meta` and `<key>:idem:<idempotency key>`. */
  key: string
  /** Events a resume may read from the stream; the stream itself keeps at least STREAM_MIN_LENGTH. */
  historyMaxEvents: number
  /** publish() settles within this many ms; Redis refuses to run a publish past it. */
  publishTimeoutMs: number
  /** Publishes awaiting Redis at once; beyond, publish() refuses at once. */
  maxPendingPublishes: number
  /** Publishes of one turn sent in one pipeline at most (1: each on its own); default DEFAULTS.maxPublishBatch. */
  maxPublishBatch?: number
  /** How long Redis remembers an idempotency key. */
  idempotencyWindowMs: number
  /** Down this long without proof of receiving: the streams are told and closed (default DEAF_CLOSE_MS). */
  deafCloseMs?: number
  random: () => number
  log: { warn: (msg: string) => void, info: (msg: string) => void }
  /** The local wall clock (ms), for deadlines in Redis's clock; tests may inject one. */
  now?: () => number
  /** A clock that never steps (ms), for every interval; tests may inject one. */
  monotonic?: () => number
}

/** The stream keeps at least this many events, so a reader a little behind never finds its next event trimmed. */
const STREAM_MIN_LENGTH = 1000
/** Entries read per XREAD; the reader blocks this long before checking the stream for a rollback. */
const READ_COUNT = 500
const READ_BLOCK_MS = 1000
/**
 * Event data fanned out per turn of the event loop while catching up: between slices the sockets
 * write and the clients read, so a backlog never lands in one turn on every stream's byte budget.
 */
const CATCH_UP_SLICE_BYTES = 64 * 1024
/** Reconnect delays: full jitter over an exponential window, capped (no herd on Redis either). */
const BACKOFF_BASE_MS = 100
const BACKOFF_CAP_MS = 2000
const CONNECT_TIMEOUT_MS = 5000
/**
 * Every connection of ours has a deadline: a command (the blocking XREAD included, which Redis
 * answers within READ_BLOCK_MS) that has seen no reply byte for this long tears the socket down
 * and ioredis reconnects — a half-open socket never holds a reader forever. TCP keepalive too,
 * for the sockets idle in between.
 */
const SOCKET_DEADLINE_MS = READ_BLOCK_MS + 1500
const KEEPALIVE_MS = 1000
/** The watchdog asks Redis its TIME this often; unanswered for STALL_MS, the bus is down. */
const WATCHDOG_MS = 250
const STALL_MS = 1000
/** No own probe seen for this long (two probes lost and a margin): the instance cannot prove it receives, the bus is down. */
export const RECEIVE_DEADLINE_MS = 2500
/** Down for this long without proof of receiving: every stream here is told and closed with a jittered retry, again each such spell. */
export const DEAF_CLOSE_MS = 5000
/** A TIME answer slower than this measures the clock offset too loosely to be kept. */
const OFFSET_MAX_RTT_MS = 100
/** Redis's own deadline is this much before the caller's, so a publish it runs is usually answered in time. */
const DEADLINE_MARGIN_MS = 50
/** Epochs a reader remembers having left (their ids are answered without asking Redis). */
const PAST_EPOCHS = 8
const STATE_EVENTS = ['error', 'close', 'ready'] as const
const COMMAND = 'towerSseBus'

type StreamEntry = [id: string, fields: string[]]
type MetaReply = [kind: 'meta', epoch: string, seq: string, marker: string]
type ScriptReply = [kind: 'late'] | [kind: 'dup', id: string] | [kind: 'ok', epoch: string, id: string, seq: string] | MetaReply
type BusCommand = (stream: string, meta: string, idempotency: string, ...args: Array<string | number>) => Promise<ScriptReply>

/** What a connection's server says about itself: who it is, whether a restart loses nothing, its clock. */
interface ServerFacts {
  runId: string
  lossless: boolean
  /** Redis ms minus local ms. */
  offsetMs: number
}

interface Waiter {
  resolve: (published: Published) => void
  reject: (error: Error) => void
  /** The id Redis gave it (null until the script answered). */
  id: string | null
  position: EventPosition | null
  timer: NodeJS.Timeout
}

/**
 * Redis Streams as the bus (centrifuge's broker is the model): one stream is the truth and the
 * shared history, published to atomically by a script that stamps the epoch and a contiguous
 * sequence number; each instance reads it with one blocking reader on its own connection and fans
 * out locally. Whatever breaks continuity — a hole in the sequence, a stream or counter that went
 * back, a server that restarted or failed over without proof it lost nothing — turns into a
 * resync of the streams concerned, never a silent gap. No offline queue, and a deadline on every
 * publish that Redis itself enforces: a publish is answered in time, and never lands late.
 */
export class RedisBus implements Bus {
  readonly shared = true
  private readonly publisher: Redis
  private readonly reader: Redis
  private readonly ownsPublisher: boolean
  private readonly streamKey: string
  private readonly metaKey: string
  private readonly maxLength: number
  private readonly now: () => number
  private readonly monotonic: () => number
  private readonly proof: ReceiveProof
  private readonly origin = randomBytes(6).toString('base64url')
  private readonly waiters = new Map<string, Waiter>()
  private readonly publishes: PublishBatch
  private deliver: Deliver = () => 0
  private lost: Lost = () => {}
  private deaf: Deaf = () => {}
  /** When the streams were last closed for a deaf spell (monotonic ms). */
  private deafClosedAt = -Infinity
  /** The epoch being delivered, its last delivered sequence number and stream id. */
  private epoch: string | null = null
  private lastSeq = 0
  private cursor = '0-0'
  /** Epochs this reader delivered before the current one, newest last (a few suffice: ids that old are gone). */
  private readonly pastEpochs: string[] = []
  private publisherFacts: ServerFacts | null = null
  /** What the reader's server said when it connected (the idle check needs no more: a new server means a new connection). */
  private readerFacts: ServerFacts | null = null
  private published = 0
  private delivered = 0
  private reads = 0
  private lagMs = 0
  private discontinuities = 0
  private recheck = false
  /** The reader met a sequence number at or below one it delivered, in the same epoch. */
  private rolledBack = false
  private closed = false
  private wasUp = true
  private loop: Promise<void> = Promise.resolve()
  /**
   * Settles (rejected) when close() begins: the read loop's waits race it, so a close never waits on
   * Redis — a reconnect that disconnect() cancels emits no 'end', and a stalled server answers nothing.
   */
  private readonly stopping: Promise<never>
  private stop: () => void = () => {}
  private readonly watchdog: NodeJS.Timeout
  private readonly stopRestarts: Array<() => void>
  /** When the watchdog's outstanding TIME was sent, monotonic ms (null: none outstanding). */
  private probeSentAt: number | null = null
  private stalled = false
  private configNoted = false

  constructor (private readonly options: RedisBusOptions) {
    this.streamKey = `${options.key}:stream`
    this.metaKey = `${options.key}:meta`
    this.maxLength = Math.max(options.historyMaxEvents, STREAM_MIN_LENGTH)
    this.now = options.now ?? Date.now
    this.stopping = new Promise<never>((_resolve, reject) => { this.stop = () => reject(new BusClosedError()) })
    this.stopping.catch(() => undefined)
    this.monotonic = options.monotonic ?? monotonicNow
    this.proof = new ReceiveProof(`${options.key}:probe:${this.origin}`, this.monotonic)
    const own: RedisOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      connectTimeout: CONNECT_TIMEOUT_MS,
      socketTimeout: SOCKET_DEADLINE_MS,
      keepAlive: KEEPALIVE_MS,
      // The reader duplicates an app's client too: it must not hold a close on a stalled server either.
      disconnectTimeout: DISCONNECT_TIMEOUT_MS,
      // The same full-jitter curve as before the shared helper: windows of 200 ms, 400 ms, … 2 s.
      retryStrategy: (attempt) => backoffDelayMs(attempt + 1, options.random, BACKOFF_BASE_MS, BACKOFF_CAP_MS)
    }
    if (typeof options.redis === 'string') {
      this.publisher = createRedisConnection(options.redis, own)
      this.ownsPublisher = true
    } else {
      this.publisher = options.redis
      this.ownsPublisher = false
    }
    // The blocking reader needs a connection of its own; it is always ours.
    this.reader = this.publisher.duplicate(own)
    // A new connection may be to another server (a restart, a failover): learn who it is before publishing.
    // First of the 'ready' listeners, so the state is never judged "up" on the old connection's facts.
    this.publisher.on('ready', this.learnPublisher)
    for (const connection of [this.publisher, this.reader]) {
      connection.defineCommand(COMMAND, { numberOfKeys: 3, lua: BUS_SCRIPT })
      // Errors surface as rejected commands and as the bus's state; unhandled they would crash the app.
      for (const name of STATE_EVENTS) connection.on(name, this.noteState)
    }
    this.publishes = new PublishBatch(this.publisher, COMMAND, options.maxPublishBatch ?? DEFAULTS.maxPublishBatch)
    this.reader.on('ready', () => { this.readerFacts = null })
    // Only our own connections: an app's connection that ended is the app's to start again.
    const restartDelay = (): number => backoffDelayMs(RESTART_ATTEMPT, options.random, BACKOFF_BASE_MS, BACKOFF_CAP_MS)
    this.stopRestarts = (this.ownsPublisher ? [this.publisher, this.reader] : [this.reader]).map((connection) => restartWhenEnded(connection, restartDelay))
    this.watchdog = setInterval(this.watch, WATCHDOG_MS).unref()
  }

  async subscribe (deliver: Deliver, lost: Lost, deaf: Deaf = () => {}): Promise<StartPoint> {
    this.deliver = deliver
    this.lost = lost
    this.deaf = deaf
    // Where, for a start-up error: the URL without its secrets, or the app's own client.
    const where = typeof this.options.redis === 'string' ? redactRedisUrl(this.options.redis) : 'the ioredis client given'
    try {
      await Promise.all([firstReady(this.publisher, CONNECT_TIMEOUT_MS), firstReady(this.reader, CONNECT_TIMEOUT_MS)])
    } catch (error) {
      this.closeConnections()
      throw new BusStartError(where, (error as Error).message)
    }
    try {
      await this.checkPermissions(where)
      await this.checkEviction()
      this.publisherFacts = await this.factsOf(this.publisher)
      const [, epoch, seq, marker] = await this.run(this.publisher, 'check', this.publisherFacts) as MetaReply
      const [tail] = await this.publisher.xrevrange(this.streamKey, '+', '-', 'COUNT', 1) as StreamEntry[]
      // The tail is this epoch's newest entry (its marker at least) unless it was trimmed or deleted since.
      const newest = tail !== undefined && fieldOf(tail[1], 'e') === epoch ? tail : [marker, []] as StreamEntry
      this.epoch = epoch
      this.cursor = newest[0]
      this.lastSeq = newest === tail ? Number(fieldOf(tail[1], 'n')) : Number(seq)
    } catch (error) {
      this.closeConnections()
      throw error
    }
    const position = positionOf(this.epoch, this.cursor)
    this.proof.restart()
    this.loop = this.readLoop()
    return { floor: position, last: { id: formatEventId(position), position } }
  }

  publish (message: BusMessage): Promise<Published> {
    if (this.closed) return Promise.reject(new BusClosedError())
    const facts = this.publisherFacts
    if (this.publisher.status !== 'ready') return Promise.reject(new BusUnavailableError(`Redis connection is ${this.publisher.status}`))
    if (facts === null) return Promise.reject(new BusUnavailableError('Redis reconnected and is not checked yet (which server, whether it lost anything)'))
    if (this.stalled) return Promise.reject(new BusUnavailableError(`Redis has not answered for over ${STALL_MS} ms`))
    if (this.waiters.size >= this.options.maxPendingPublishes) return Promise.reject(new BusBusyError(this.waiters.size))
    const token = `${this.origin}:${++this.published}`
    const fields = ['d', message.data, 'o', token]
    if (message.event !== undefined) fields.push('v', message.event)
    if (message.topic !== undefined) fields.push('t', message.topic)
    if (message.idProperty !== undefined) fields.push('i', message.idProperty)
    const { publishTimeoutMs } = this.options
    const deadline = Math.floor(this.now() + publishTimeoutMs - Math.min(DEADLINE_MARGIN_MS, publishTimeoutMs / 4) + facts.offsetMs)
    const key = message.idempotencyKey
    return new Promise<Published>((resolve, reject) => {
      // Registered before the script runs: the reader may deliver the event before its reply arrives.
      const waiter: Waiter = {
        resolve,
        reject,
        id: null,
        position: null,
        timer: setTimeout(() => {
          this.waiters.delete(token)
          // Redis has it (it answered with an id) but it is not delivered here yet: published.
          if (waiter.id !== null) resolve({ id: waiter.id, delivered: 0 })
          else reject(new PublishOutcomeUnknownError(publishTimeoutMs))
        }, publishTimeoutMs)
      }
      this.waiters.set(token, waiter)
      const idempotency = key === undefined ? this.metaKey : `${this.options.key}:idem:${key}`
      this.run(this.publisher, 'pub', facts, idempotency, deadline, key === undefined ? '0' : '1', ...fields).then((reply) => {
        if (this.waiters.get(token) !== waiter) return
        if (reply[0] === 'ok') {
          const position = positionOf(reply[1], reply[2])
          waiter.id = formatEventId(position)
          // Delivered by the reader, or (below what it delivered: a rollback) settled by its check.
          waiter.position = position
          return
        }
        this.settle(token, waiter)
        if (reply[0] === 'dup') resolve({ id: reply[1], delivered: 0 })
        else reject(new BusUnavailableError('Redis ran the publish after its deadline and refused it'))
      }, (error: Error) => {
        if (this.waiters.get(token) !== waiter) return
        this.settle(token, waiter)
        // An error Redis sent means the script did not publish; a lost connection leaves it unknown.
        if (error.name === 'ReplyError') reject(new BusUnavailableError(error.message))
        else reject(new PublishOutcomeUnknownError(publishTimeoutMs))
      })
    })
  }

  read (after: EventPosition, upTo: EventPosition): Promise<BusRead> {
    if (after.minor === null) return Promise.resolve({ kind: 'gone', reason: 'unknown' })
    if (after.epoch !== this.epoch) return this.readOtherEpoch(after.epoch)
    this.reads++
    const from = streamId(after)
    // `after` itself is read too: its sequence number is where the contiguous run must start.
    const reading = this.publisher.xrange(this.streamKey, from, streamId(upTo), 'COUNT', this.options.historyMaxEvents + 2) as Promise<StreamEntry[]>
    return reading.then((entries): BusRead => {
      const first = entries[0]
      if (first?.[0] !== from) return { kind: 'gone', reason: 'too-old' }
      if (fieldOf(first[1], 'e') !== after.epoch) return { kind: 'gone', reason: 'unknown' }
      let seq = Number(fieldOf(first[1], 'n'))
      const events: BusEvent[] = []
      for (const [id, fields] of entries.slice(1)) {
        if (fieldOf(fields, 'e') !== after.epoch) break
        // A hole in the sequence: events after `after` were lost (trimmed, deleted, rolled back).
        if (Number(fieldOf(fields, 'n')) !== ++seq) return { kind: 'gone', reason: 'lost' }
        events.push(eventOf(id, fields))
      }
      if (events.length > this.options.historyMaxEvents) return { kind: 'gone', reason: 'too-old' }
      const reached = events.at(-1)?.id ?? formatEventId(after)
      if (upTo.epoch === after.epoch && reached !== formatEventId(upTo)) return { kind: 'gone', reason: 'lost' }
      return { kind: 'events', events }
    })
  }

  /**
   * An id of an epoch this reader is not in: one it left, or one Redis no longer is in, is gone;
   * the epoch Redis is in now means this instance lags behind the client (Redis was replaced while
   * it was cut off), and a resync from here would move the client back.
   */
  private async readOtherEpoch (epoch: string): Promise<BusRead> {
    if (this.pastEpochs.includes(epoch)) return { kind: 'gone', reason: 'unknown' }
    const current = await this.publisher.hget(this.metaKey, 'e')
    return current === epoch ? { kind: 'behind' } : { kind: 'gone', reason: 'unknown' }
  }

  stats (): BusStats {
    return { kind: 'redis', state: this.isUp() ? 'up' : 'down', delivered: this.delivered, reads: this.reads, lagMs: this.lagMs, discontinuities: this.discontinuities }
  }

  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.stop()
    clearInterval(this.watchdog)
    this.closeConnections()
    await this.loop
    for (const [token, waiter] of this.waiters) {
      this.settle(token, waiter)
      // Redis has it (it answered with an id): published, just not delivered here any more.
      if (waiter.id !== null) waiter.resolve({ id: waiter.id, delivered: 0 })
      else waiter.reject(new BusClosedError())
    }
  }

  private settle (token: string, waiter: Waiter): void {
    clearTimeout(waiter.timer)
    this.waiters.delete(token)
  }

  private run (connection: Redis, mode: 'pub' | 'check' | 'rotate', facts: ServerFacts, idempotency = this.metaKey, deadline = 0, keep = '0', ...rest: string[]): Promise<ScriptReply> {
    const args = [this.streamKey, this.metaKey, idempotency, mode, newEpochName(), facts.runId, facts.lossless ? '1' : '0',
      this.maxLength, deadline, keep, this.options.idempotencyWindowMs, mode === 'rotate' ? (this.epoch ?? '') : '', ...rest] as const
    // Publishes go in this turn's pipeline; checks and rotations, rare, at once.
    if (mode === 'pub' && connection === this.publisher) return this.publishes.call(args) as Promise<ScriptReply>
    const command = (connection as unknown as Record<typeof COMMAND, BusCommand>)[COMMAND].bind(connection)
    return command(...args)
  }

  /**
   * The dry run: the script asks Redis's ACL whether this user may run each command the bus runs
   * on its keys (a read-only user would start and then fail every publish), changing nothing.
   */
  private async checkPermissions (where: string): Promise<void> {
    const command = (this.publisher as unknown as Record<typeof COMMAND, (...args: string[]) => Promise<string[]>>)[COMMAND].bind(this.publisher)
    let refused: string | null
    try {
      refused = describeRefusals((await command(this.streamKey, this.metaKey, `${this.options.key}:idem:dry-run`, 'dry', this.proof.key)).slice(1))
    } catch (error) {
      throw new BusStartError(where, explainStartFailure(error as Error))
    }
    if (refused !== null) throw new BusStartError(where, refused)
  }

  /**
   * Whether the bus's keys can be evicted: under allkeys-* they can, so register is refused; our
   * keys but the idempotency ones carry no TTL, so volatile-* and noeviction keep them.
   */
  private async checkEviction (): Promise<void> {
    let policy: string | undefined
    try {
      policy = (await this.publisher.call('CONFIG', 'GET', 'maxmemory-policy') as string[])[1]
    } catch {
      this.noteConfigDisabled()
      return
    }
    if (policy?.startsWith('allkeys-') === true) throw new BusEvictableError(policy)
  }

  private noteConfigDisabled (): void {
    if (this.configNoted) return
    this.configNoted = true
    this.options.log.info('tower-sse: Redis refuses CONFIG GET (managed Redis?): the bus cannot check maxmemory-policy (keep it noeviction or volatile-*) ' +
      'nor prove a restart lossless, so every Redis restart costs each client one resync')
  }

  /**
   * The server's run_id (new at every restart or failover), whether it is provably lossless across
   * a restart (an AOF written with fsync on every write, and not a promoted replica, whose data
   * may lag its old primary's), and its clock's offset from ours.
   */
  private async factsOf (connection: Redis): Promise<ServerFacts> {
    const sent = this.now()
    const [[, time], [, server], [, replication], [, appendonly], [, fsync]] = await connection.pipeline()
      .time().info('server').info('replication')
      .call('CONFIG', 'GET', 'appendonly').call('CONFIG', 'GET', 'appendfsync')
      .exec() as Array<[Error | null, unknown]>
    const runId = /^run_id:(\w+)/m.exec(String(server))?.[1]
    if (runId === undefined) throw new BusUnavailableError('Redis INFO server has no run_id')
    if (!Array.isArray(appendonly)) this.noteConfigDisabled()
    const promoted = /^second_repl_offset:(-?\d+)/m.exec(String(replication))?.[1] !== '-1'
    const lossless = (appendonly as string[] | undefined)?.[1] === 'yes' && (fsync as string[] | undefined)?.[1] === 'always' && !promoted
    return { runId, lossless, offsetMs: offsetOf(time as [string, string], sent, this.now()) }
  }

  private readonly learnPublisher = (): void => {
    this.publisherFacts = null
    this.noteState()
    this.factsOf(this.publisher).then((facts) => {
      if (this.publisher.status !== 'ready') return
      this.publisherFacts = facts
      this.noteState()
    }, () => this.publisher.disconnect(true))
  }

  /**
   * The watchdog, every WATCHDOG_MS: the end-to-end probe (is this instance receiving?), the state
   * it decides, the streams told when it has not received for DEAF_CLOSE_MS, and one TIME
   * outstanding at most (unanswered for STALL_MS, the bus is down).
   */
  private readonly watch = (): void => {
    if (this.epoch === null || this.closed) return
    if (this.publisher.status === 'ready' && this.publisherFacts !== null) this.proof.send(this.publisher)
    this.noteState()
    const silent = this.proof.silentMs()
    const closeAfter = this.options.deafCloseMs ?? DEAF_CLOSE_MS
    if (silent > RECEIVE_DEADLINE_MS + closeAfter && this.monotonic() - this.deafClosedAt >= RECEIVE_DEADLINE_MS + closeAfter) {
      this.deafClosedAt = this.monotonic()
      this.options.log.warn(`tower-sse: this instance has not proven it receives from Redis for ${Math.round(silent)} ms: its streams are told (resync) and closed with a jittered retry`)
      this.deaf()
    }
    if (this.probeSentAt !== null) {
      if (!this.stalled && this.monotonic() - this.probeSentAt >= STALL_MS) {
        this.stalled = true
        this.noteState()
      }
      return
    }
    if (this.publisher.status !== 'ready') return
    this.probeSentAt = this.monotonic()
    const sent = this.now()
    this.publisher.time().then((time) => {
      const answered = this.now()
      if (answered - sent <= OFFSET_MAX_RTT_MS && this.publisherFacts !== null) this.publisherFacts.offsetMs = offsetOf(time.map(String) as [string, string], sent, answered)
    }, () => undefined).finally(() => {
      this.probeSentAt = null
      if (!this.stalled) return
      this.stalled = false
      this.noteState()
    })
  }

  private closeConnections (): void {
    for (const stop of this.stopRestarts) stop()
    clearInterval(this.watchdog)
    this.reader.disconnect()
    this.publisher.off('ready', this.learnPublisher)
    if (this.ownsPublisher) this.publisher.disconnect()
    else for (const name of STATE_EVENTS) this.publisher.off(name, this.noteState)
  }

  private isUp (): boolean {
    return !this.closed && !this.stalled && this.publisherFacts !== null && this.publisher.status === 'ready' && this.reader.status === 'ready' &&
      this.proof.silentMs() <= RECEIVE_DEADLINE_MS
  }

  /** One log line per change of state, not one per failed reconnect. */
  private readonly noteState = (): void => {
    const up = this.isUp()
    // Before subscribe() is done there is no state to report yet.
    if (up === this.wasUp || this.closed || this.epoch === null) return
    this.wasUp = up
    if (up) this.options.log.info('tower-sse: Redis bus is up again; reading on from the last delivered event')
    else this.options.log.warn('tower-sse: Redis bus is down or not answering; streams stay open, broadcasts are refused until it is back')
  }

  /** The one blocking reader of this instance: reads after the last delivered id, forever. */
  private async readLoop (): Promise<void> {
    while (!this.closed) {
      try {
        if (this.reader.status !== 'ready') {
          await this.unlessClosed(ready(this.reader)).catch(() => undefined)
          this.recheck = true
          continue
        }
        if (this.recheck) {
          await this.unlessClosed(this.checkContinuity())
          continue
        }
        // The probe stream beside the bus's: an own probe wakes the read, and proves it reads.
        const reply = await this.unlessClosed(this.reader.xread('COUNT', READ_COUNT, 'BLOCK', READ_BLOCK_MS, 'STREAMS', this.streamKey, this.proof.key, this.cursor, this.proof.cursor) as Promise<Array<[string, StreamEntry[]]> | null>)
        const entries = reply?.find(([name]) => name === this.streamKey)?.[1] ?? []
        const probes = reply?.find(([name]) => name === this.proof.key)?.[1]
        if (probes !== undefined) this.proof.saw(probes)
        // Nothing on the bus's stream for a read: an idle spell, when the check looks for a rollback.
        if (entries.length === 0) this.recheck = true
        else await this.deliverPaced(entries)
      } catch {
        // A dropped connection rejects the blocked XREAD; ioredis reconnects with our backoff.
        this.recheck = true
        if (this.reader.status === 'ready' && !this.closed) await delay(BACKOFF_BASE_MS)
      }
    }
  }

  /** The wait, cut short (rejected) when close() begins. */
  private unlessClosed<T> (waiting: Promise<T>): Promise<T> {
    waiting.catch(() => undefined)
    return Promise.race([waiting, this.stopping])
  }

  /** Fans out a batch in slices, yielding between them so sockets drain what a slice wrote. */
  private async deliverPaced (entries: StreamEntry[]): Promise<void> {
    let bytes = 0
    for (const [id, fields] of entries) {
      if (this.closed) return
      if (bytes >= CATCH_UP_SLICE_BYTES) {
        bytes = 0
        await new Promise((resolve) => setImmediate(resolve))
      }
      bytes += fieldOf(fields, 'd')?.length ?? 0
      this.deliverEntry(id, fields)
      // The rest of the batch waits for the check: it may belong to a history this reader must leave.
      if (this.recheck) return
    }
  }

  /**
   * After an idle spell or a reconnect: vouches for the epoch on this server (the script makes a
   * new one if the server changed without proof of no loss), then looks for a rollback: the
   * counter or the stream's tail below what this reader delivered means acknowledged events are
   * gone, so the epoch is retired for every instance.
   */
  private async checkContinuity (): Promise<void> {
    const facts = this.readerFacts ?? await this.factsOf(this.reader)
    this.readerFacts = facts
    let [, epoch, seq, marker] = await this.run(this.reader, 'check', facts) as MetaReply
    if (epoch === this.epoch) {
      const [tail] = await this.reader.xrevrange(this.streamKey, '+', '-', 'COUNT', 1) as StreamEntry[]
      if (this.rolledBack || Number(seq) < this.lastSeq || tail === undefined || compareStreamIds(tail[0], this.cursor) < 0) {
        [, epoch, seq, marker] = await this.run(this.reader, 'rotate', facts) as MetaReply
      }
    }
    this.rolledBack = false
    this.recheck = false
    if (epoch === this.epoch) return
    const [entry] = await this.reader.xrange(this.streamKey, marker, marker) as StreamEntry[]
    this.switchEpoch(epoch, marker, entry?.[1] ?? [])
  }

  /**
   * Follows a new epoch from its marker. Its clients lost nothing only if this reader had delivered
   * exactly the last event of the epoch it replaces; otherwise every stream here resyncs.
   */
  private switchEpoch (epoch: string, marker: string, fields: string[]): void {
    const continuous = fieldOf(fields, 'p') === this.epoch && Number(fieldOf(fields, 'q')) === this.lastSeq
    if (this.epoch !== null && this.pastEpochs.push(this.epoch) > PAST_EPOCHS) this.pastEpochs.shift()
    this.epoch = epoch
    this.lastSeq = 0
    this.cursor = marker
    if (!continuous) this.discontinuity(positionOf(epoch, marker), 'lost')
    // Publishes of the epoch left behind are in Redis but will never be delivered here.
    for (const [token, waiter] of this.waiters) {
      if (waiter.position !== null && waiter.position.epoch !== epoch) {
        this.settle(token, waiter)
        waiter.resolve({ id: waiter.id as string, delivered: 0 })
      }
    }
  }

  /** Every stream here resyncs at `at`; publishes up to it that were not delivered settle as published. */
  private discontinuity (at: EventPosition, reason: string): void {
    this.discontinuities++
    this.options.log.warn(`tower-sse: Redis bus cannot prove continuity (${reason}); streams here get a resync`)
    const id = formatEventId(at)
    this.lost({ id, position: at }, reason)
    for (const [token, waiter] of this.waiters) {
      const pos = waiter.position
      if (pos !== null && pos.epoch === at.epoch && compareStreamIds(streamId(pos), streamId(at)) <= 0) {
        this.settle(token, waiter)
        waiter.resolve({ id: waiter.id as string, delivered: 0 })
      }
    }
  }

  private deliverEntry (id: string, fields: string[]): void {
    const epoch = fieldOf(fields, 'e') ?? ''
    const seq = Number(fieldOf(fields, 'n'))
    this.cursor = id
    if (seq === 0) {
      if (epoch !== this.epoch) this.switchEpoch(epoch, id, fields)
      return
    }
    if (epoch !== this.epoch || !(seq > this.lastSeq)) {
      // An epoch whose marker this reader never saw (the check follows it), or a sequence gone
      // back within one: a rollback, so the check retires the epoch.
      this.rolledBack ||= epoch === this.epoch
      this.recheck = true
      return
    }
    const token = fieldOf(fields, 'o')
    const waiter = token === undefined ? undefined : this.waiters.get(token)
    if (waiter !== undefined && token !== undefined && seq !== this.lastSeq + 1) {
      this.settle(token, waiter)
      waiter.resolve({ id: formatEventId(positionOf(epoch, id)), delivered: 0 })
    }
    if (seq !== this.lastSeq + 1) {
      // A hole: trimmed past this reader, or deleted. Only this instance's streams missed it.
      this.lastSeq = seq
      this.discontinuity(positionOf(epoch, id), 'gap')
      return
    }
    this.lastSeq = seq
    const event = eventOf(id, fields)
    this.delivered++
    // In Redis's clock (the ids are its ms): a local clock ahead or behind is no lag.
    this.lagMs = Math.max(0, this.now() + (this.readerFacts?.offsetMs ?? this.publisherFacts?.offsetMs ?? 0) - event.position.major)
    const count = this.deliver(event)
    if (waiter !== undefined && token !== undefined) {
      this.settle(token, waiter)
      waiter.resolve({ id: event.id, delivered: count })
    }
  }
}

function ready (connection: Redis): Promise<void> {
  if (connection.status === 'ready') return Promise.resolve()
  if (connection.status === 'wait') return connection.connect()
  return new Promise((resolve, reject) => {
    // Unref'd: a wait that close() cut short must not hold the process either.
    const timer = setTimeout(() => done(new Error(`not ready after ${CONNECT_TIMEOUT_MS} ms (${connection.status})`)), CONNECT_TIMEOUT_MS).unref()
    const done = (error?: Error): void => {
      clearTimeout(timer)
      connection.off('ready', onReady)
      connection.off('end', onEnd)
      if (error === undefined) resolve()
      else reject(error)
    }
    const onReady = (): void => done()
    const onEnd = (): void => done(new Error('connection ended'))
    connection.once('ready', onReady)
    connection.once('end', onEnd)
  })
}

function delay (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Redis's clock minus ours, from a TIME answered between `sent` and `answered` (to within half the round trip). */
function offsetOf ([seconds, micros]: [string, string], sent: number, answered: number): number {
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) - (sent + answered) / 2
}

/** A fresh epoch, proposed with every script call and used only when one is made. */
/**
 * Random bytes for epoch names, 8 a name, refilled once every 64 names: every publish proposes one
 * (the script takes it only if it must start an epoch), and a randomBytes call per publish was a
 * tenth of an instance's CPU publishing flat out.
 */
const epochNameBytes = Buffer.alloc(8 * 64)
let epochNameOffset = epochNameBytes.length

function newEpochName (): string {
  if (epochNameOffset === epochNameBytes.length) {
    randomFillSync(epochNameBytes)
    epochNameOffset = 0
  }
  const bytes = epochNameBytes.subarray(epochNameOffset, epochNameOffset += 8)
  return BigInt('0x' + bytes.toString('hex')).toString(36).slice(0, 12)
}

function streamId (position: EventPosition): string {
  return `${position.major}-${position.minor ?? 0}`
}

function compareStreamIds (a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt)
  const [bm, bs] = b.split('-').map(BigInt)
  return am === bm ? Number(as - bs) : Number(am - bm)
}

function positionOf (epoch: string, id: string): EventPosition {
  const dash = id.indexOf('-')
  return { epoch, major: Number(id.slice(0, dash)), minor: Number(id.slice(dash + 1)) }
}

function fieldOf (fields: string[], name: string): string | undefined {
  for (let i = 0; i < fields.length; i += 2) {
    if (fields[i] === name) return fields[i + 1]
  }
  return undefined
}

function eventOf (id: string, fields: string[]): BusEvent {
  const position = positionOf(fieldOf(fields, 'e') ?? '', id)
  return {
    position,
    id: formatEventId(position),
    data: fieldOf(fields, 'd') ?? '',
    event: fieldOf(fields, 'v'),
    topic: fieldOf(fields, 't'),
    idProperty: fieldOf(fields, 'i')
  }
}
