import type { RedisConnection } from './connection'
import { BusEvictableError, BusUnavailableError } from '../../errors'

/**
 * What one stream entry is assumed to take in Redis, for the start-up memory check: an event of
 * about 4 KB of data with its fields (epoch, sequence, origin, topic) and the stream's own overhead.
 */
export const ASSUMED_ENTRY_BYTES = 4096

/** What a connection's server says about itself: who it is, whether a restart loses nothing, its clock. */
export interface ServerFacts {
  runId: string
  lossless: boolean
  /** Redis's clock against ours, from the best of the recent TIME round trips (the watchdog adds one every few hundred ms). */
  clock: ClockOffset
}

/**
 * Asks a server what the bus must know of it before trusting it: its run_id (new at every
 * restart or failover), whether it is provably lossless across a restart, its clock's offset
 * from ours, and whether its eviction policy may drop the bus's keys. A managed Redis that refuses
 * CONFIG GET is said once in the log.
 */
export class ServerFactsReader {
  private configNoted = false

  constructor (private readonly now: () => number, private readonly log: { info: (msg: string) => void, warn: (msg: string) => void }) {}

  /**
   * Lossless means an AOF written with fsync on every write, and not a promoted replica, whose
   * data may lag its old primary's. The server asked is the one holding `slotKey` (on a Cluster,
   * a pipeline goes to the node of its keyed command; the server's commands name no key).
   */
  async read (connection: RedisConnection, slotKey: string): Promise<ServerFacts> {
    const sent = this.now()
    const [, [, time], [, server], [, replication], [, appendonly], [, fsync]] = await connection.pipeline()
      .exists(slotKey).time().info('server').info('replication')
      .call('CONFIG', 'GET', 'appendonly').call('CONFIG', 'GET', 'appendfsync')
      .exec() as Array<[Error | null, unknown]>
    const runId = /^run_id:(\w+)/m.exec(String(server))?.[1]
    if (runId === undefined) throw new BusUnavailableError('Redis INFO server has no run_id')
    if (!Array.isArray(appendonly)) this.noteConfigRefused()
    const promoted = /^second_repl_offset:(-?\d+)/m.exec(String(replication))?.[1] !== '-1'
    const lossless = (appendonly as string[] | undefined)?.[1] === 'yes' && (fsync as string[] | undefined)?.[1] === 'always' && !promoted
    const clock = new ClockOffset()
    clock.add(time, sent, this.now())
    return { runId, lossless, clock }
  }

  /**
   * Refuses a server whose keys can be evicted: under allkeys-* they can; the bus's keys but the
   * idempotency ones carry no TTL, so volatile-* and noeviction keep them. Warns once when
   * `maxmemory` is set and the stream alone, full, could take half of it (then Redis refuses
   * writes, the broadcasts' and every other client's, before the stream is trimmed).
   */
  async checkEviction (connection: RedisConnection, slotKey: string, streamEntries: number): Promise<void> {
    let policy: string | undefined
    let maxmemory: number
    try {
      // Behind a command on the slot's key: on a Cluster the answer is the slot's node's.
      const [, [policyError, policyReply], [memoryError, memoryReply]] = await connection.pipeline().exists(slotKey)
        .call('CONFIG', 'GET', 'maxmemory-policy').call('CONFIG', 'GET', 'maxmemory').exec() as Array<[Error | null, unknown]>
      if (policyError !== null) throw policyError
      if (memoryError !== null) throw memoryError
      policy = (policyReply as string[])[1]
      maxmemory = Number((memoryReply as string[])[1])
    } catch {
      this.noteConfigRefused()
      return
    }
    if (policy?.startsWith('allkeys-') === true) throw new BusEvictableError(policy)
    const streamBytes = streamEntries * ASSUMED_ENTRY_BYTES
    if (maxmemory > 0 && streamBytes > maxmemory / 2) {
      this.log.warn(`tower-sse: Redis maxmemory is ${maxmemory} bytes, and the bus's stream keeps up to ${streamEntries} entries: ` +
        `about ${streamBytes} bytes at ${ASSUMED_ENTRY_BYTES} bytes an entry, over half of it; ` +
        'give Redis more memory or keep fewer events (history.events; docs/bus-operations.md)')
    }
  }

  private noteConfigRefused (): void {
    if (this.configNoted) return
    this.configNoted = true
    this.log.info('tower-sse: Redis refuses CONFIG GET (managed Redis?): the bus cannot check maxmemory-policy (keep it noeviction or volatile-*) ' +
      'nor prove a restart lossless, so every Redis restart costs each client one resync')
  }
}

/** TIME round trips kept: the one with the shortest round trip decides the offset (as NTP's clock filter keeps 8). */
const OFFSET_SAMPLES = 8

/**
 * Redis's clock minus ours, estimated from TIME: a TIME answered between `sent` and `answered`
 * was read at some instant in between, so the true offset is within half the round trip of the
 * midpoint's — wherever the path's delay sits (1.5 s one way and 0 back puts it at one end). Of the
 * last OFFSET_SAMPLES round trips the shortest is kept, so a latency spike does not widen the
 * bound, and a path slow for good still refreshes it (the best of what it has) instead of never.
 */
export class ClockOffset {
  /** Redis ms minus local ms, at the best sample's midpoint. */
  offsetMs = 0
  /** The true offset is within ± this of offsetMs: half the best sample's round trip. */
  uncertaintyMs = Infinity
  private readonly samples: Array<{ offsetMs: number, uncertaintyMs: number }> = []

  /** `reply`: TIME's, as the connection gave it (checked here: on a Cluster a redirected pipeline's reply may be another command's). */
  add (reply: unknown, sent: number, answered: number): void {
    // A reply that is not a time (a broken connection's, a proxy's, another command's) measures nothing.
    if (!Array.isArray(reply) || reply.length !== 2) return
    const redisMs = Number(reply[0]) * 1000 + Number(reply[1]) / 1000
    if (!Number.isFinite(redisMs)) return
    this.samples.push({ offsetMs: redisMs - (sent + answered) / 2, uncertaintyMs: (answered - sent) / 2 })
    if (this.samples.length > OFFSET_SAMPLES) this.samples.shift()
    const best = this.samples.reduce((a, b) => b.uncertaintyMs < a.uncertaintyMs ? b : a)
    this.offsetMs = best.offsetMs
    this.uncertaintyMs = best.uncertaintyMs
  }

  /** The earliest Redis time it can be when our clock reads `localMs`. */
  earliestRedisMs (localMs: number): number {
    return localMs + this.offsetMs - this.uncertaintyMs
  }
}
