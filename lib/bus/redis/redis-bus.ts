import { randomBytes } from 'node:crypto'
import { randomName } from '../../shared/random-id'
import { nextTurn } from '../../shared/slices'
import { disconnectQuietly, isCluster, openBusConnections, whenReady, CONNECT_TIMEOUT_MS, type OwnConnection, type RedisConnection } from './connection'
import { keyPrefix } from './keys'
import { redactRedisUrl } from './url'
import { comparePositions, formatEventId, type EventPosition } from '../event-id'
import { BusBusyError, BusClosedError, BusStartError, BusUnavailableError } from '../../errors'
import type { Bus, BusMessage, BusRead, BusStats, Deaf, Deliver, Lost, Published, StartPoint } from '../bus'
import { BUS_SCRIPT } from './script'
import { PROBE_EVERY_MS, ReceiveProof } from './receive-proof'
import { describeRefusals, explainStartFailure, firstReady } from './start-up'
import { monotonicNow } from '../../shared/clocks'
import { Continuity, judgeRange, type EpochStep } from './continuity'
import { compareStreamIds, eventOf, fieldOf, messageFields, placeOf, positionOf, streamId, tokenOf, type StreamEntry } from './entry-codec'
import { PublishWaiters, type PublishReply } from './publish-waiters'
import { ServerFactsReader, type ServerFacts } from './server-facts'
import { OutOfMemory } from './out-of-memory'
import { DEAF_CLOSE_MS, RECEIVE_DEADLINE_MS, STALL_MS, Watchdog } from './watchdog'

export interface RedisBusOptions {
  /** A redis://, rediss://, redis+sentinel:// or redis+cluster:// URL (the bus owns its connections), or an ioredis client or Cluster (the app owns it). */
  connection: string | RedisConnection
  /** Keys used, all in one hash slot: `{<key>}:stream`, `{<key>}:meta`, `{<key>}:idem:<idempotency key>`, `{<key>}:probe:<instance>`. */
  key: string
  /** Events a resume may read from the stream; the stream itself keeps at least STREAM_MIN_LENGTH. */
  historyEvents: number
  /** publish() settles within this many ms; Redis refuses to run a publish past it. */
  publishTimeoutMs: number
  /** Publishes awaiting Redis at once; beyond, publish() refuses at once. */
  maxPendingPublishes: number
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
/** A command with no reply byte for this long (the blocking XREAD included, which Redis answers within READ_BLOCK_MS) drops its socket. */
const COMMAND_DEADLINE_MS = READ_BLOCK_MS + 1500
/** After a failed read on a connection still ready, the reader waits this long before reading again. */
const READ_RETRY_MS = 100
/** The watchdog's period: the receive probe, the state, the TIME that detects a stall. */
const WATCHDOG_MS = 250
/** Redis's own deadline is this much before the caller's, so a publish it runs is usually answered in time. */
const DEADLINE_MARGIN_MS = 50
const STATE_EVENTS = ['error', 'close', 'ready'] as const
const COMMAND = 'towerSseBus'

type MetaReply = [kind: 'meta', epoch: string, seq: string, marker: string]
type BusCommand = (stream: string, meta: string, idempotency: string, ...args: Array<string | number>) => Promise<PublishReply | MetaReply>

/**
 * Redis Streams as the bus (centrifuge's broker is the model): one stream is the truth and the
 * shared history, published to atomically by a script that stamps the epoch and a contiguous
 * sequence number; each instance reads it with one blocking reader on its own connection and fans
 * out locally. Whatever breaks continuity — a hole in the sequence, a stream or counter that went
 * back, a server that restarted or failed over without proof it lost nothing — turns into a
 * resync of the streams concerned, never a silent gap. No offline queue, and a deadline on every
 * publish that Redis itself enforces: a publish is answered in time, and never lands late.
 *
 * This file wires the parts and runs the reader: the connections (connection.ts), what the server
 * is and whether it answers (server-facts.ts, watchdog.ts), the publishes awaiting their outcome
 * (publish-waiters.ts), where the reader stands and whether it lost anything (continuity.ts,
 * pure), the entries' fields (entry-codec.ts) and the script (script.ts).
 */
export class RedisBus implements Bus {
  readonly shared = true
  private readonly publisher: RedisConnection
  private readonly reader: RedisConnection
  private readonly prefix: string
  private readonly ownsPublisher: boolean
  private readonly stopRestarts: () => void
  private readonly openOwn: () => OwnConnection
  private readonly streamKey: string
  private readonly metaKey: string
  private readonly maxLength: number
  private readonly now: () => number
  private readonly monotonic: () => number
  private readonly proof: ReceiveProof
  private readonly origin = randomBytes(6).toString('base64url')
  private readonly continuity = new Continuity()
  private readonly waiters: PublishWaiters
  private readonly facts: ServerFactsReader
  private readonly watchdog: Watchdog
  private readonly watchTimer: NodeJS.Timeout
  private readonly memory: OutOfMemory
  private deliver: Deliver = () => 0
  private lost: Lost = () => {}
  private deaf: Deaf = () => {}
  private publisherFacts: ServerFacts | null = null
  /** What the reader's server said when it connected (the idle check needs no more: a new server means a new connection). */
  private readerFacts: ServerFacts | null = null
  private published = 0
  private slotFactsAt = -Infinity
  private slotFactsInFlight = false
  private delivered = 0
  private reads = 0
  private lagMs = 0
  private discontinuities = 0
  private closed = false
  private lastState: BusStats['state'] = 'up'
  private loop: Promise<void> = Promise.resolve()
  /**
   * Settles (rejected) when close() begins: the read loop's waits race it, so a close never waits on
   * Redis — a reconnect that disconnect() cancels emits no 'end', and a stalled server answers nothing.
   */
  private readonly stopping: Promise<never>
  private stop: () => void = () => {}

  constructor (private readonly options: RedisBusOptions) {
    this.prefix = keyPrefix(options.key)
    this.streamKey = `${this.prefix}:stream`
    this.metaKey = `${this.prefix}:meta`
    this.maxLength = Math.max(options.historyEvents, STREAM_MIN_LENGTH)
    this.now = options.now ?? Date.now
    this.stopping = new Promise<never>((_resolve, reject) => { this.stop = () => reject(new BusClosedError()) })
    this.stopping.catch(() => undefined)
    this.monotonic = options.monotonic ?? monotonicNow
    this.memory = new OutOfMemory(this.monotonic, options.log, () => this.noteState())
    this.proof = new ReceiveProof(`${this.prefix}:probe:${this.origin}`, this.monotonic, this.probeWritten)
    this.waiters = new PublishWaiters(options.publishTimeoutMs)
    this.facts = new ServerFactsReader(this.now, options.log)
    this.watchdog = new Watchdog({ now: this.now, monotonic: this.monotonic }, options.deafCloseMs ?? DEAF_CLOSE_MS, () => this.noteState())
    const connections = openBusConnections(options.connection, options.random, COMMAND_DEADLINE_MS)
    this.publisher = connections.publisher
    this.reader = connections.reader
    this.ownsPublisher = connections.ownsPublisher
    this.stopRestarts = connections.stopRestarts
    this.openOwn = connections.open
    // A new connection may be to another server (a restart, a failover): learn who it is before publishing.
    // First of the 'ready' listeners, so the state is never judged "up" on the old connection's facts.
    this.publisher.on('ready', this.learnPublisher)
    for (const connection of [this.publisher, this.reader]) {
      connection.defineCommand(COMMAND, { numberOfKeys: 3, lua: BUS_SCRIPT })
      // Errors surface as rejected commands and as the bus's state; unhandled they would crash the app.
      for (const name of STATE_EVENTS) connection.on(name, this.noteState)
    }
    this.reader.on('ready', () => { this.readerFacts = null })
    this.watchTimer = setInterval(this.watch, WATCHDOG_MS).unref()
  }

  /**
   * A connection of its own for resumable streams' logs, to the bus's Redis: answers' appends
   * queued on the bus's connection would hold back its publishes and its receive probe (a loaded
   * quick run of bench:resume once refused streams TOWER_SSE_BUS_DEAF with 1,000 answers at once).
   */
  openConnection (): OwnConnection {
    return this.openOwn()
  }

  async subscribe (deliver: Deliver, lost: Lost, deaf: Deaf = () => {}): Promise<StartPoint> {
    this.deliver = deliver
    this.lost = lost
    this.deaf = deaf
    // Where, for a start-up error: the URL without its secrets, or the app's own client.
    const where = typeof this.options.connection === 'string' ? redactRedisUrl(this.options.connection) : 'the ioredis client given'
    try {
      await Promise.all([firstReady(this.publisher, CONNECT_TIMEOUT_MS), firstReady(this.reader, CONNECT_TIMEOUT_MS)])
    } catch (error) {
      this.closeConnections()
      throw new BusStartError(where, (error as Error).message)
    }
    try {
      await this.checkPermissions(where)
      await this.facts.checkEviction(this.publisher, this.metaKey, this.maxLength)
      this.publisherFacts = await this.facts.read(this.publisher, this.metaKey)
      const [, epoch, seq, marker] = await this.run(this.publisher, 'check', this.publisherFacts) as MetaReply
      const [tail] = await this.publisher.xrevrange(this.streamKey, '+', '-', 'COUNT', 1) as StreamEntry[]
      this.continuity.start(epoch, Number(seq), marker, tail === undefined ? undefined : { id: tail[0], place: placeOf(tail[1]) })
    } catch (error) {
      this.closeConnections()
      throw error
    }
    const position = positionOf(this.continuity.epoch as string, this.continuity.cursor)
    this.proof.restart()
    this.loop = this.readLoop()
    return { floor: position, last: { id: formatEventId(position), position } }
  }

  publish (message: BusMessage): Promise<Published> {
    if (this.closed) return Promise.reject(new BusClosedError())
    const facts = this.publisherFacts
    if (this.publisher.status !== 'ready') return Promise.reject(new BusUnavailableError(`Redis connection is ${this.publisher.status}`))
    if (facts === null) return Promise.reject(new BusUnavailableError('Redis reconnected and is not checked yet (which server, whether it lost anything)'))
    if (this.watchdog.stalled) return Promise.reject(new BusUnavailableError(`Redis has not answered for over ${STALL_MS} ms`))
    if (this.waiters.size >= this.options.maxPendingPublishes) return Promise.reject(new BusBusyError(this.waiters.size))
    const token = `${this.origin}:${++this.published}`
    const published = this.waiters.wait(token)
    const { publishTimeoutMs } = this.options
    // The earliest Redis time the caller's answer can be at: Redis refuses a run past it, so one it
    // runs was run before the caller is told "unknown", however asymmetric the path to Redis is.
    const deadline = Math.floor(facts.clock.earliestRedisMs(this.now() + publishTimeoutMs - Math.min(DEADLINE_MARGIN_MS, publishTimeoutMs / 4)))
    const key = message.idempotencyKey
    const idempotency = key === undefined ? this.metaKey : `${this.prefix}:idem:${key}`
    this.run(this.publisher, 'pub', facts, idempotency, deadline, key === undefined ? '0' : (message.idempotencyHash ?? ''), ...messageFields(message, token)).then(
      (reply) => {
        if ((reply as PublishReply)[0] === 'ok') this.tookWrite()
        this.waiters.answered(token, reply as PublishReply)
      },
      (error: Error) => {
        if (error.name === 'ReplyError') this.memory.publishRefused(error)
        this.waiters.failed(token, error)
      })
    return published
  }

  read (after: EventPosition, upTo: EventPosition): Promise<BusRead> {
    if (after.minor === null) return Promise.resolve({ kind: 'gone', reason: 'unknown' })
    if (after.epoch !== this.continuity.epoch) return this.readOtherEpoch(after.epoch)
    this.reads++
    const from = streamId(after)
    // Whether Redis holds `after` at all, before any range is read: an id it never had (forged, from
    // the future) or has trimmed costs one entry, not a history's worth of them.
    const probe = this.publisher.xrange(this.streamKey, from, from) as Promise<StreamEntry[]>
    return probe.then(async (held) => {
      if (held.length === 0) return await this.absent(from)
      if (comparePositions(upTo, after) <= 0) return judgeRange(held, after, upTo, this.options.historyEvents)
      // `after` itself is read too: its sequence number is where the contiguous run must start.
      const reading = this.publisher.xrange(this.streamKey, from, streamId(upTo), 'COUNT', this.options.historyEvents + 2) as Promise<StreamEntry[]>
      return reading.then((entries) => judgeRange(entries, after, upTo, this.options.historyEvents))
    })
  }

  /**
   * Why Redis does not hold the entry `streamId` of the epoch it is in: trimmed or deleted (older
   * than its newest entry), or never issued at all (past it: forged, from the future).
   */
  private async absent (streamId: string): Promise<BusRead> {
    const newest = await this.publisher.xrevrange(this.streamKey, '+', '-', 'COUNT', 1) as StreamEntry[]
    const last = newest[0]?.[0]
    return { kind: 'gone', reason: last !== undefined && compareStreamIds(streamId, last) < 0 ? 'too-old' : 'unknown' }
  }

  /**
   * An id of an epoch this reader is not in: one it left, or one Redis no longer is in, is gone;
   * the epoch Redis is in now means this instance lags behind the client (Redis was replaced while
   * it was cut off), and a resync from here would move the client back.
   */
  private async readOtherEpoch (epoch: string): Promise<BusRead> {
    if (this.continuity.left(epoch)) return { kind: 'gone', reason: 'unknown' }
    const current = await this.publisher.hget(this.metaKey, 'e')
    return current === epoch ? { kind: 'behind' } : { kind: 'gone', reason: 'unknown' }
  }

  stats (): BusStats {
    return {
      kind: 'redis',
      state: this.state(),
      delivered: this.delivered,
      reads: this.reads,
      lagMs: this.lagMs,
      discontinuities: this.discontinuities,
      refusedPublishes: this.memory.refusedPublishes
    }
  }

  receiving (): boolean {
    return !this.closed && (this.memory.active || this.proof.silentMs() <= RECEIVE_DEADLINE_MS)
  }

  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.stop()
    this.closeConnections()
    await this.loop
    this.waiters.close()
  }

  private run (connection: RedisConnection, mode: 'pub' | 'check' | 'rotate', facts: ServerFacts, idempotency = this.metaKey, deadline = 0, keep = '0', ...rest: string[]): Promise<PublishReply | MetaReply> {
    const args = [this.streamKey, this.metaKey, idempotency, mode, randomName(), facts.runId, facts.lossless ? '1' : '0',
      this.maxLength, deadline, keep, this.options.idempotencyWindowMs, mode === 'rotate' ? (this.continuity.epoch ?? '') : '', ...rest] as const
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
      refused = describeRefusals((await command(this.streamKey, this.metaKey, `${this.prefix}:idem:dry-run`, 'dry', this.proof.key)).slice(1))
    } catch (error) {
      throw new BusStartError(where, explainStartFailure(error as Error))
    }
    if (refused !== null) throw new BusStartError(where, refused)
  }

  private readonly learnPublisher = (): void => {
    this.publisherFacts = null
    this.noteState()
    this.facts.read(this.publisher, this.metaKey).then((facts) => {
      if (this.publisher.status !== 'ready') return
      this.publisherFacts = facts
      this.noteState()
    }, () => {
      // A read that fails is a connection to drop and make again — unless the bus closed meanwhile.
      if (!this.closed) disconnectQuietly(this.publisher, true)
    })
  }

  /**
   * Every WATCHDOG_MS: the end-to-end probe (is this instance receiving?), the state it decides,
   * the streams told when it has not received for the deaf spell, and the stall watch.
   */
  private readonly watch = (): void => {
    if (this.continuity.epoch === null || this.closed) return
    if (this.publisher.status === 'ready' && this.publisherFacts !== null) this.proof.send(this.publisher)
    this.noteState()
    const silent = this.proof.silentMs()
    // Out of memory, the probe cannot be written, so its silence proves no deafness: the spell is 'oom', not deaf.
    if (!this.memory.active && this.watchdog.deafSpellOver(silent)) {
      this.options.log.warn(`tower-sse: this instance has not proven it receives from Redis for ${Math.round(silent)} ms: its streams are told (resync) and closed with a jittered retry`)
      this.deaf()
    }
    this.watchdog.probe(this.publisher, this.metaKey, () => this.publisherFacts)
    if (isCluster(this.publisher)) this.followSlotOwner()
  }

  /**
   * On a Cluster the node serving the bus's slot changes without a reconnect (a migration, a
   * failover): every PROBE_EVERY_MS the facts of the slot's node are read again, and another
   * run_id is learnt as a reconnect's is. The next publish then vouches for the epoch with the new
   * node's facts (the script starts a new epoch naming the last one unless that node is lossless),
   * and the reader checks continuity again with them: a reader vouching with the old node's facts
   * would start yet another epoch and skip to its marker.
   */
  private followSlotOwner (): void {
    const now = this.monotonic()
    if (this.slotFactsInFlight || now - this.slotFactsAt < PROBE_EVERY_MS || this.publisherFacts === null) return
    this.slotFactsAt = now
    this.slotFactsInFlight = true
    this.facts.read(this.publisher, this.metaKey).then((facts) => {
      if (this.publisherFacts === null || facts.runId === this.publisherFacts.runId) return
      // Both connections reach the slot's node: the reader's next check vouches with these facts too.
      this.publisherFacts = facts
      this.readerFacts = facts
      this.continuity.suspect()
    }, () => undefined).finally(() => { this.slotFactsInFlight = false })
  }

  private closeConnections (): void {
    this.stopRestarts()
    clearInterval(this.watchTimer)
    disconnectQuietly(this.reader)
    this.publisher.off('ready', this.learnPublisher)
    if (this.ownsPublisher) disconnectQuietly(this.publisher)
    else for (const name of STATE_EVENTS) this.publisher.off(name, this.noteState)
  }

  /**
   * 'oom' while connected and Redis refuses writes for memory (the probe too, so receiving is not
   * proven then); 'up' while connected and receiving is proven; 'down' otherwise.
   */
  private state (): BusStats['state'] {
    const connected = !this.closed && !this.watchdog.stalled && this.publisherFacts !== null && this.publisher.status === 'ready' && this.reader.status === 'ready'
    if (!connected) return 'down'
    if (this.memory.active) return 'oom'
    return this.proof.silentMs() <= RECEIVE_DEADLINE_MS ? 'up' : 'down'
  }

  /** A probe write answered: an OOM refusal starts a spell, a write taken ends one. */
  private readonly probeWritten = (error: Error | null): void => {
    if (error !== null) {
      this.memory.writeRefused(error)
      return
    }
    this.tookWrite()
  }

  /**
   * Redis took a write (a publish or a probe): an out-of-memory spell, if any, is over, and the
   * receive deadline starts again from now — no probe could be written during the spell, so its
   * silence proves no deafness (a spell ended by a publish was otherwise judged down, and closed
   * every stream as deaf, just as Redis recovered).
   */
  private tookWrite (): void {
    if (this.memory.active) this.proof.restart()
    this.memory.wrote()
  }

  /** One log line per change of state, not one per failed reconnect (an out-of-memory spell logs its own). */
  private readonly noteState = (): void => {
    const state = this.state()
    // Until subscribe() is done there is no state to report.
    if (state === this.lastState || this.closed || this.continuity.epoch === null) return
    const was = this.lastState
    this.lastState = state
    if (state === 'down') this.options.log.warn('tower-sse: Redis bus is down or not answering; streams stay open, broadcasts are refused until it is back')
    else if (state === 'up' && was === 'down') this.options.log.info('tower-sse: Redis bus is up again; reading on from the last delivered event')
  }

  /** The one blocking reader of this instance: reads after the last delivered id, forever. */
  private async readLoop (): Promise<void> {
    while (!this.closed) {
      try {
        if (this.reader.status !== 'ready') {
          await this.unlessClosed(whenReady(this.reader)).catch(() => undefined)
          this.continuity.suspect()
          continue
        }
        if (this.continuity.checkDue) {
          await this.unlessClosed(this.checkContinuity())
          continue
        }
        // The probe stream beside the bus's: an own probe wakes the read, and proves it reads.
        const reply = await this.unlessClosed(this.reader.xread('COUNT', READ_COUNT, 'BLOCK', READ_BLOCK_MS, 'STREAMS', this.streamKey, this.proof.key, this.continuity.cursor, this.proof.cursor) as Promise<Array<[string, StreamEntry[]]> | null>)
        const entries = reply?.find(([name]) => name === this.streamKey)?.[1] ?? []
        const probes = reply?.find(([name]) => name === this.proof.key)?.[1]
        if (probes !== undefined) this.proof.saw(probes)
        // Nothing on the bus's stream for a read: an idle spell, when the check looks for a rollback.
        if (entries.length === 0) this.continuity.suspect()
        else await this.deliverPaced(entries)
      } catch {
        // A dropped connection rejects the blocked XREAD; ioredis reconnects with our backoff.
        this.continuity.suspect()
        if (this.reader.status === 'ready' && !this.closed) await delay(READ_RETRY_MS)
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
        await nextTurn()
      }
      bytes += fieldOf(fields, 'd')?.length ?? 0
      this.deliverEntry(id, fields)
      // The rest of the batch waits for the check: it may belong to a history this reader must leave.
      if (this.continuity.checkDue) return
    }
  }

  /**
   * After an idle spell or a reconnect: vouches for the epoch on this server (the script makes a
   * new one if the server changed without proof of no loss), then looks for a rollback: the
   * counter or the stream's tail below what this reader delivered means acknowledged events are
   * gone, so the epoch is retired for every instance.
   */
  private async checkContinuity (): Promise<void> {
    const facts = this.readerFacts ?? await this.facts.read(this.reader, this.metaKey)
    this.readerFacts = facts
    let [, epoch, seq, marker] = await this.run(this.reader, 'check', facts) as MetaReply
    if (epoch === this.continuity.epoch) {
      const [tail] = await this.reader.xrevrange(this.streamKey, '+', '-', 'COUNT', 1) as StreamEntry[]
      if (this.continuity.mustRotate(Number(seq), tail?.[0])) {
        [, epoch, seq, marker] = await this.run(this.reader, 'rotate', facts) as MetaReply
      }
    }
    if (!this.continuity.checked(epoch)) return
    // The stream may hold entries after this reader's cursor and before the new epoch's marker:
    // the rest of the epoch left (as when the check itself starts the epoch), and whole epochs
    // other instances started meanwhile (a slot migration: each publisher vouches with the node it
    // knows, one after the other). Delivered first, in order, each marker judged as read, so the
    // new marker can prove nothing was lost; a step not judged (a sequence gone back, a marker
    // trimmed) stops there and the marker decides.
    for (let page = READ_COUNT; page === READ_COUNT && !this.continuity.checkDue && !this.closed;) {
      const rest = await this.reader.xrange(this.streamKey, `(${this.continuity.cursor}`, `(${marker}`, 'COUNT', READ_COUNT) as StreamEntry[]
      page = rest.length
      await this.deliverPaced(rest)
    }
    if (this.closed) return
    // An entry there not judged (a sequence gone back) is not read again: the marker decides.
    this.continuity.checked(epoch)
    const [entry] = await this.reader.xrange(this.streamKey, marker, marker) as StreamEntry[]
    this.followed(this.continuity.follow(epoch, marker, placeOf(entry?.[1] ?? []).previous))
  }

  /** A new epoch followed: the streams resync unless its marker proved nothing was lost. */
  private followed (step: EpochStep): void {
    if (!step.continuous) this.discontinuity(step.at, 'lost')
    // Publishes of the epoch left behind are in Redis but will never be delivered here.
    this.waiters.leftFor(step.at.epoch)
  }

  /** Every stream here resyncs at `at`; publishes up to it that were not delivered settle as published. */
  private discontinuity (at: EventPosition, reason: string): void {
    this.discontinuities++
    this.options.log.warn(`tower-sse: Redis bus cannot prove continuity (${reason}); streams here get a resync`)
    this.lost({ id: formatEventId(at), position: at }, reason)
    this.waiters.passedUpTo(at)
  }

  /** Does what the continuity state says of an entry, for the streams and the publish waiting for it. */
  private deliverEntry (id: string, fields: string[]): void {
    const step = this.continuity.read(id, placeOf(fields))
    const token = tokenOf(fields)
    if (step.kind === 'epoch') this.followed(step)
    else if (step.kind === 'gap') {
      // A hole: trimmed past this reader, or deleted. Only this instance's streams missed it.
      this.waiters.passed(token, formatEventId(step.at))
      this.discontinuity(step.at, 'gap')
    } else if (step.kind === 'next') {
      const event = eventOf(id, fields)
      this.delivered++
      // In Redis's clock (the ids are its ms): a local clock ahead or behind is no lag. The publisher's
      // offset is the one the watchdog keeps fresh.
      this.lagMs = Math.max(0, this.now() + (this.publisherFacts?.clock.offsetMs ?? this.readerFacts?.clock.offsetMs ?? 0) - event.position.major)
      this.waiters.delivered(token, event.id, this.deliver(event))
    }
  }
}

function delay (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
