import { randomBytes } from 'node:crypto'
import type { Redis, RedisOptions } from 'ioredis'
import { comparePositions, formatEventId, type EventPosition } from '../event-id'
import { BusClosedError, BusUnavailableError } from '../errors'
import type { Bus, BusEvent, BusMessage, BusRead, BusStats, Deliver, Published, StartPoint } from './bus'
import { PUBLISH_SCRIPT, PUBLISH_SCRIPT_SHA } from './redis-script'
import { createRedisConnection } from './redis-connection'

export interface RedisBusOptions {
  /** A redis://, rediss:// or redis+sentinel:// URL (the bus owns its connections), or an ioredis client (the app owns it). */
  redis: string | Redis
  /** Keys used: `<key>:stream` and `<key>:epoch`. */
  key: string
  /** Events a resume may read from the stream; the stream itself keeps at least STREAM_MIN_LENGTH. */
  historyMaxEvents: number
  random: () => number
  log: { warn: (msg: string) => void, info: (msg: string) => void }
}

/** The stream keeps at least this many events, so a reader a little behind never finds its next event trimmed. */
const STREAM_MIN_LENGTH = 1000
/** Entries read per XREAD; the reader blocks this long before checking the epoch again. */
const READ_COUNT = 500
const READ_BLOCK_MS = 5000
/** Reconnect delays: full jitter over an exponential window, capped (no herd on Redis either). */
const BACKOFF_BASE_MS = 100
const BACKOFF_CAP_MS = 2000
const CONNECT_TIMEOUT_MS = 5000
const STATE_EVENTS = ['error', 'close', 'ready'] as const

type StreamEntry = [id: string, fields: string[]]

interface Waiter {
  resolve: (published: Published) => void
  reject: (error: Error) => void
  id: string | null
}

/**
 * Redis Streams as the bus (centrifuge's broker is the model): one stream is the truth and the
 * shared history, published to atomically by a script that stamps the epoch; each instance reads
 * it with one blocking reader on its own connection and fans out locally. An epoch key that
 * vanishes with the stream (restart without persistence, FLUSHALL) gives the new stream a new
 * epoch, so stale ids get a resync. No offline queue: while Redis is down publish rejects.
 */
export class RedisBus implements Bus {
  readonly shared = true
  private readonly publisher: Redis
  private readonly reader: Redis
  private readonly ownsPublisher: boolean
  private readonly streamKey: string
  private readonly epochKey: string
  private readonly maxLength: number
  private readonly origin = randomBytes(6).toString('base64url')
  private readonly waiters = new Map<string, Waiter>()
  private deliver: Deliver = () => 0
  private epoch: string | null = null
  /** Entries of an epoch left behind are never delivered again, even if a reread meets them. */
  private retiredEpoch: string | null = null
  private last: EventPosition | null = null
  private cursor = '0-0'
  private recheckEpoch = false
  private published = 0
  private delivered = 0
  private reads = 0
  private lagMs = 0
  private closed = false
  private wasUp = true
  private loop: Promise<void> = Promise.resolve()

  constructor (private readonly options: RedisBusOptions) {
    this.streamKey = `${options.key}:stream`
    this.epochKey = `${options.key}:epoch`
    this.maxLength = Math.max(options.historyMaxEvents, STREAM_MIN_LENGTH)
    const own: RedisOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      connectTimeout: CONNECT_TIMEOUT_MS,
      retryStrategy: (attempt) => Math.round(options.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(attempt, 10)))
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
    for (const connection of [this.publisher, this.reader]) {
      // Errors surface as rejected commands and as the bus's state; unhandled they would crash the app.
      for (const name of STATE_EVENTS) connection.on(name, this.noteState)
    }
  }

  async subscribe (deliver: Deliver): Promise<StartPoint> {
    this.deliver = deliver
    await Promise.all([ready(this.publisher), ready(this.reader)]).catch((error: Error) => {
      this.closeConnections()
      throw new BusUnavailableError(`cannot connect to Redis: ${error.message}`)
    })
    const [epoch, newest] = await Promise.all([
      this.publisher.get(this.epochKey),
      this.publisher.xrevrange(this.streamKey, '+', '-', 'COUNT', 1) as Promise<StreamEntry[]>
    ])
    this.epoch = epoch
    let start: StartPoint = { floor: epoch === null ? null : { epoch, major: 0, minor: 0 }, last: null }
    const entry = newest[0]
    if (entry !== undefined) {
      const position = positionOf(fieldOf(entry[1], 'e') ?? '', entry[0])
      this.epoch = position.epoch
      this.last = position
      this.cursor = entry[0]
      start = { floor: position, last: { id: formatEventId(position), position } }
    }
    this.loop = this.readLoop()
    return start
  }

  async publish (message: BusMessage): Promise<Published> {
    if (this.closed) throw new BusClosedError()
    if (this.publisher.status !== 'ready') throw new BusUnavailableError(`Redis connection is ${this.publisher.status}`)
    const token = `${this.origin}:${++this.published}`
    const fields = ['d', message.data, 'o', token]
    if (message.event !== undefined) fields.push('v', message.event)
    if (message.topic !== undefined) fields.push('t', message.topic)
    if (message.idProperty !== undefined) fields.push('i', message.idProperty)
    // Registered before the XADD: the reader may deliver the event before its reply arrives.
    const delivered = new Promise<Published>((resolve, reject) => this.waiters.set(token, { resolve, reject, id: null }))
    const args = [2, this.streamKey, this.epochKey, newEpochName(), this.maxLength, ...fields] as const
    let added: [string, string]
    try {
      added = await this.publisher.evalsha(PUBLISH_SCRIPT_SHA, ...args).catch(async (error: Error) => {
        if (!error.message.startsWith('NOSCRIPT')) throw error
        return await this.publisher.eval(PUBLISH_SCRIPT, ...args)
      }) as [string, string]
    } catch (error) {
      this.waiters.delete(token)
      throw new BusUnavailableError((error as Error).message)
    }
    const waiter = this.waiters.get(token)
    if (waiter !== undefined) waiter.id = formatEventId(positionOf(added[0], added[1]))
    return await delivered
  }

  read (after: EventPosition, upTo: EventPosition): Promise<BusRead> {
    if (after.epoch !== this.epoch || after.minor === null) return Promise.resolve({ kind: 'gone', reason: 'unknown' })
    this.reads++
    const from = streamId(after)
    // `after` itself is read too: finding it proves the stream still holds everything since.
    const reading = this.publisher.xrange(this.streamKey, from, streamId(upTo), 'COUNT', this.options.historyMaxEvents + 2) as Promise<StreamEntry[]>
    return reading.then((entries): BusRead => {
      if (entries[0]?.[0] !== from) return { kind: 'gone', reason: 'too-old' }
      const events: BusEvent[] = []
      for (const [id, fields] of entries.slice(1)) {
        const event = eventOf(id, fields)
        if (event.position.epoch !== after.epoch) break
        events.push(event)
      }
      if (events.length > this.options.historyMaxEvents) return { kind: 'gone', reason: 'too-old' }
      return { kind: 'events', events }
    })
  }

  stats (): BusStats {
    return { kind: 'redis', state: this.isUp() ? 'up' : 'down', delivered: this.delivered, reads: this.reads, lagMs: this.lagMs }
  }

  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.closeConnections()
    await this.loop
    for (const [token, waiter] of this.waiters) {
      this.waiters.delete(token)
      // Redis has it (it answered with an id): published, just not delivered here any more.
      if (waiter.id !== null) waiter.resolve({ id: waiter.id, delivered: 0 })
      else waiter.reject(new BusClosedError())
    }
  }

  private closeConnections (): void {
    this.reader.disconnect()
    if (this.ownsPublisher) this.publisher.disconnect()
    else for (const name of STATE_EVENTS) this.publisher.off(name, this.noteState)
  }

  private isUp (): boolean {
    return !this.closed && this.publisher.status === 'ready' && this.reader.status === 'ready'
  }

  /** One log line per change of state, not one per failed reconnect. */
  private readonly noteState = (): void => {
    const up = this.isUp()
    if (up === this.wasUp || this.closed) return
    this.wasUp = up
    if (up) this.options.log.info('tower-sse: Redis bus is up again; reading on from the last delivered event')
    else this.options.log.warn('tower-sse: Redis bus is down; streams stay open, broadcasts are refused until it is back')
  }

  /** The one blocking reader of this instance: reads after the last delivered id, forever. */
  private async readLoop (): Promise<void> {
    while (!this.closed) {
      try {
        if (this.reader.status !== 'ready') {
          await ready(this.reader).catch(() => undefined)
          this.recheckEpoch = true
          continue
        }
        if (this.recheckEpoch) await this.checkEpoch()
        const reply = await this.reader.xread('COUNT', READ_COUNT, 'BLOCK', READ_BLOCK_MS, 'STREAMS', this.streamKey, this.cursor) as Array<[string, StreamEntry[]]> | null
        if (reply === null) {
          this.recheckEpoch = true
          continue
        }
        for (const [id, fields] of reply[0][1]) {
          this.cursor = id
          this.deliverEntry(id, fields)
        }
      } catch {
        // A dropped connection rejects the blocked XREAD; ioredis reconnects with our backoff.
        this.recheckEpoch = true
        if (this.reader.status === 'ready' && !this.closed) await delay(BACKOFF_BASE_MS)
      }
    }
  }

  /**
   * After an outage or an idle spell: if the epoch key changed (or vanished), the stream we read
   * was lost; read the new one from its start, never delivering the old epoch's entries again.
   */
  private async checkEpoch (): Promise<void> {
    const epoch = await this.reader.get(this.epochKey)
    this.recheckEpoch = false
    if (epoch === this.epoch) return
    if (this.epoch !== null) this.retiredEpoch = this.epoch
    this.cursor = '0-0'
  }

  private deliverEntry (id: string, fields: string[]): void {
    const event = eventOf(id, fields)
    const { epoch } = event.position
    if (epoch === this.retiredEpoch) return
    if (this.last !== null && this.last.epoch === epoch && comparePositions(event.position, this.last) <= 0) return
    if (epoch !== this.epoch && this.epoch !== null) this.retiredEpoch = this.epoch
    this.epoch = epoch
    this.last = event.position
    this.delivered++
    this.lagMs = Math.max(0, Date.now() - event.position.major)
    const count = this.deliver(event)
    const token = fieldOf(fields, 'o')
    const waiter = token === undefined ? undefined : this.waiters.get(token)
    if (waiter !== undefined && token !== undefined) {
      this.waiters.delete(token)
      waiter.resolve({ id: event.id, delivered: count })
    }
  }
}

function ready (connection: Redis): Promise<void> {
  if (connection.status === 'ready') return Promise.resolve()
  if (connection.status === 'wait') return connection.connect()
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`not ready after ${CONNECT_TIMEOUT_MS} ms (${connection.status})`)), CONNECT_TIMEOUT_MS)
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

/** A fresh epoch, proposed with every publish and used only when the stream has none. */
function newEpochName (): string {
  return BigInt('0x' + randomBytes(8).toString('hex')).toString(36).slice(0, 12)
}

function streamId (position: EventPosition): string {
  return `${position.major}-${position.minor ?? 0}`
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
