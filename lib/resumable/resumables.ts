import type { FastifyBaseLogger } from 'fastify'
import { dataText, encodeEvent, encodeText, checkEventName, type SseEvent } from '../events/encoder'
import type { Subscriber } from '../streams/subscriber'
import { SingleFlight } from '../shared/single-flight'
import { nextTurn, PULLS_PER_TURN } from '../shared/slices'
import { IdSeal, isStreamId, newStreamId, ownerHash, parseResumableEventId } from './resumable-id'
import type { LogEntry, LoggedEvent, LogOutcome, LogRead, ResumableLog } from './log'
import type { StreamSource } from '../events/event-source'

/** A producer proves itself alive this often; a reader reaps a producer silent for LIVENESS_MS. */
export const HEARTBEAT_MS = 1000
/** Past this silence a producer is gone, and its log ends as an error: attached streams are told within it plus a HEARTBEAT_MS. */
export const LIVENESS_MS = 5000
/** Entries a reader takes from the log at once. */
const PAGE = 500
/** Events a producer has pulled and not yet appended: it pulls no more until they are written. */
const MAX_UNWRITTEN = 1000

/** What a stream's `resumable` option holds, normalised. */
export interface ResumableAsk {
  /** The app's own id for the stream (a message id), or a generated one. */
  id?: string
  ttlMs: number
}

/** Where a request for a resumable stream stands, decided before anything is written. */
export type ResumeDecision =
  /** Another owner's stream, or none ever: told apart by nothing. */
  | { kind: 'notFound' }
  /** The client has the end (its id is the end's): nothing more will come. */
  | { kind: 'done' }
  /** The log is gone (past its ttl); the client may have missed its end: a resync, then the end's id. */
  | { kind: 'expired', id: string, seal: string }
  /** The log cannot be reached now: refused with a Retry-After, as any stream nothing could feed. */
  | { kind: 'unavailable' }
  /** Replay after `after`, then the live tail. */
  | { kind: 'attach', id: string, seal: string, after: number }
  /** No such stream yet: this request's producer makes it. */
  | { kind: 'new', id: string, seal: string }

/** Where the events of a stream's producer go on this instance. */
interface Produced {
  readonly controller: AbortController
}

/**
 * Resumable streams: one producer per stream id (on the instance that first opens it) appends its
 * events to the stream's log, never to a connection; every connection attached to it, on any
 * instance, reads the log after its Last-Event-ID, then follows it to the end. A connection that
 * leaves stops nothing; `cancel(id)` stops the producer wherever it runs.
 */
export class Resumables {
  private seal: IdSeal | null = null
  private starting: Promise<IdSeal> | null = null
  private closed = false
  private readonly produced = new Map<string, Produced>()
  /** Wakes of the connections following each stream on this instance. */
  private readonly following = new Map<string, Set<() => void>>()
  private readonly reads = new SingleFlight<LogRead | null>()
  private timer: NodeJS.Timeout | undefined

  constructor (private readonly log: ResumableLog, private readonly logger: FastifyBaseLogger) {}

  /**
   * The seal, once the log is reached: started on first use, so that an app without resumable
   * streams holds no connection to their log and runs no timer. A failed start is not kept: the
   * next use tries again.
   */
  private async started (): Promise<IdSeal> {
    if (this.seal !== null) return this.seal
    this.starting ??= this.log.secret().then((secret) => {
      if (this.closed) throw new Error('tower-sse: resumable streams are closed')
      this.seal = new IdSeal(secret)
      this.log.watch((id, ended) => this.changed(id, ended))
      this.timer = setInterval(() => this.prove(), HEARTBEAT_MS).unref()
      return this.seal
    }).finally(() => { this.starting = null })
    return await this.starting
  }

  /**
   * What a request for a resumable stream gets: from its Last-Event-ID when that is one of a
   * resumable stream (the owner's, or not found), else from the app's id (or a new one).
   */
  async decide (key: string, lastEventId: string | undefined, ask: ResumableAsk): Promise<ResumeDecision> {
    try {
      return await this.decideFromLog(key, lastEventId, ask)
    } catch (error) {
      this.logger.warn({ err: error }, 'tower-sse: the log of resumable streams could not be read; the stream is refused with a Retry-After')
      return { kind: 'unavailable' }
    }
  }

  private async decideFromLog (key: string, lastEventId: string | undefined, ask: ResumableAsk): Promise<ResumeDecision> {
    const seal = await this.started()
    const owner = ownerHash(key)
    const resumed = lastEventId === undefined ? null : parseResumableEventId(lastEventId)
    if (resumed !== null) {
      if (!seal.holds(resumed, owner)) return { kind: 'notFound' }
      if (resumed.seq === 'end') return { kind: 'done' }
      const read = await this.log.read(resumed.streamId, resumed.seq, 0)
      const sealed = seal.seal(resumed.streamId, owner)
      if (read === null) return { kind: 'expired', id: resumed.streamId, seal: sealed }
      return read.meta.owner === owner ? { kind: 'attach', id: resumed.streamId, seal: sealed, after: resumed.seq } : { kind: 'notFound' }
    }
    const id = ask.id ?? newStreamId()
    const read = ask.id === undefined ? null : await this.log.read(id, 0, 0)
    if (read === null) return { kind: 'new', id, seal: seal.seal(id, owner) }
    return read.meta.owner === owner ? { kind: 'attach', id, seal: seal.seal(id, owner), after: 0 } : { kind: 'notFound' }
  }

  /**
   * Feeds a stream that just opened, as decided: the log's events after the client's id, a resync
   * for a log gone, or a new log this request's producer fills. Whatever `source` was not needed
   * is released, never started.
   */
  feed (subscriber: Subscriber, decision: Extract<ResumeDecision, { id: string }>, key: string, ttlMs: number, source: StreamSource, release: () => void): void {
    if (decision.kind === 'new') {
      void this.produce(subscriber, key, decision.id, decision.seal, ttlMs, source, release)
      return
    }
    release()
    if (decision.kind === 'attach') {
      void this.follow(subscriber, decision.id, decision.seal, decision.after)
      return
    }
    this.expired(subscriber, decision.id, decision.seal)
  }

  /**
   * A log gone past its ttl: what the client has may not be all there was (a resync), and nothing
   * more will come (the end, with the end's id: a client that reconnects anyway is answered 204).
   */
  private expired (subscriber: Subscriber, id: string, seal: string): void {
    subscriber.write(encodeEvent({ event: 'resync', data: { reason: 'expired' } }))
    subscriber.write(encodeEvent({ event: 'end', id: this.sealer().eventId(id, 'end', seal), data: { reason: 'expired' } }))
    subscriber.end('ended')
  }

  /**
   * Creates the stream's log and runs `source` into it here, then follows it on `subscriber`; if the
   * log appeared meanwhile (the same app id opened twice at once), follows that one instead and
   * `source` is released.
   */
  async produce (subscriber: Subscriber, key: string, id: string, seal: string, ttlMs: number, source: StreamSource, release: () => void): Promise<void> {
    const owner = ownerHash(key)
    let created: Awaited<ReturnType<ResumableLog['create']>>
    try {
      created = await this.log.create(id, owner, ttlMs)
    } catch (error) {
      release()
      // Nothing was produced: closed with a retry, the client asks again (an error event would stop it for good).
      this.logger.error({ err: error, streamId: subscriber.id }, 'tower-sse: a resumable stream\'s log could not be created; its stream is closed with a retry')
      subscriber.end('streamFailed')
      return
    }
    if (!created.created) {
      release()
      if (created.meta.owner !== owner) {
        subscriber.write(errorFrame('TOWER_SSE_STREAM_NOT_FOUND'))
        subscriber.end('streamFailed')
        return
      }
    } else {
      const controller = new AbortController()
      let iterator: AsyncIterator<SseEvent>
      try {
        iterator = (typeof source === 'function' ? source({ id, signal: controller.signal }) : source)[Symbol.asyncIterator]()
        this.produced.set(id, { controller })
        void this.pump(id, iterator, controller)
      } catch (error) {
        this.logger.error({ err: error, resumableId: id }, 'tower-sse: a resumable stream\'s producer failed; its followers are told')
        await this.log.finish(id, { kind: 'error', code: 'TOWER_SSE_STREAM_FAILED' }).catch(() => false)
      }
    }
    await this.follow(subscriber, id, seal, 0)
  }

  /** Stops the producer of `id` wherever it runs and ends every connection following it. */
  async cancel (id: string): Promise<boolean> {
    if (!isStreamId(id)) return false
    await this.started()
    const ended = await this.log.finish(id, { kind: 'cancelled' })
    this.produced.get(id)?.controller.abort('cancelled')
    return ended
  }

  /** Follows the log of `id` on `subscriber` from after `after`: what is there, then what comes, then its end. */
  async follow (subscriber: Subscriber, id: string, seal: string, after: number): Promise<void> {
    const sealer = this.sealer()
    let cursor = after
    let wake: (() => void) | null = null
    const wakes = this.following.get(id) ?? new Set()
    this.following.set(id, wakes)
    const woken = (): void => { wake?.() }
    wakes.add(woken)
    subscriber.whenOver(() => {
      wakes.delete(woken)
      if (wakes.size === 0 && this.following.get(id) === wakes) this.following.delete(id)
    })
    try {
      for (;;) {
        const changed = new Promise<void>((resolve) => { wake = resolve })
        const read = await subscriber.whileOpen(this.reads.run(`${id}>${cursor}`, () => this.log.read(id, cursor, PAGE)))
        if (subscriber.isOver) return
        if (read === null || read === undefined) {
          this.expired(subscriber, id, seal)
          return
        }
        if (cursor + 1 < read.first) {
          // Trimmed past this reader: what it missed is gone.
          subscriber.write(encodeEvent({ event: 'resync', data: { reason: 'too-old' } }))
          cursor = read.first - 1
          continue
        }
        for (const entry of read.entries) {
          const frame = frameOf(entry, sealer.eventId(id, entry.kind === 'end' ? 'end' : entry.seq, seal))
          if (!await subscriber.whenFits(frame.length)) return
          subscriber.write(frame)
          cursor = entry.seq
          if (entry.kind === 'end') {
            subscriber.end(entry.outcome.kind === 'error' ? 'streamFailed' : 'ended')
            return
          }
        }
        if (read.entries.length === 0) await subscriber.whileOpen(changed)
      }
    } catch (error) {
      this.logger.error({ err: error, streamId: subscriber.id }, 'tower-sse: a resumable stream\'s log could not be read; its stream is closed with a retry')
      subscriber.end('streamFailed')
    }
  }

  async close (): Promise<void> {
    this.closed = true
    clearInterval(this.timer)
    for (const [id, { controller }] of this.produced) {
      controller.abort('shutdown')
      // Told now, not after the liveness deadline: this instance stops producing.
      await this.log.finish(id, { kind: 'error', code: 'TOWER_SSE_PRODUCER_LOST' }).catch(() => false)
    }
    this.produced.clear()
    await this.log.close()
  }

  private sealer (): IdSeal {
    // Reached only after decide(), which started them.
    if (this.seal === null) throw new Error('tower-sse: resumable streams are not started')
    return this.seal
  }

  /**
   * Pulls the producer's events and appends them to the log, each batch once the one before it is
   * written (what arrives meanwhile goes in the next), pulling no further ahead than MAX_UNWRITTEN.
   * Its end, a throw, or the log stopping it (cancelled, declared gone) ends the log once.
   */
  private async pump (id: string, iterator: AsyncIterator<SseEvent>, controller: AbortController): Promise<void> {
    const unwritten: LoggedEvent[] = []
    let writing: Promise<number | null> | null = null
    let outcome: LogOutcome = { kind: 'done' }
    let stopped = false
    const flush = (): void => {
      if (writing !== null || unwritten.length === 0) return
      writing = this.log.append(id, unwritten.splice(0)).then((last) => {
        writing = null
        if (last === null) stopped = true
        else flush()
        // The followers here need no notice from Redis to read what this instance just wrote.
        this.wake(id)
        return last
      })
    }
    try {
      for (let pulls = 1; ; pulls++) {
        const next = await abortable(iterator.next(), controller.signal)
        if (next === undefined || stopped) {
          stopped = true
          break
        }
        if (next.done === true) break
        unwritten.push(logged(next.value))
        flush()
        while (unwritten.length >= MAX_UNWRITTEN && writing !== null) await writing
        if (pulls % PULLS_PER_TURN === 0) await nextTurn()
      }
      while (writing !== null) await writing
    } catch (error) {
      this.logger.error({ err: error, resumableId: id }, 'tower-sse: a resumable stream\'s producer failed; its followers are told')
      outcome = { kind: 'error', code: 'TOWER_SSE_STREAM_FAILED' }
    }
    this.produced.delete(id)
    if (stopped || controller.signal.aborted) {
      try { void Promise.resolve(iterator.return?.()).catch(() => {}) } catch {}
      return
    }
    try {
      while (writing !== null) await writing
      if (unwritten.length > 0) await this.log.append(id, unwritten.splice(0))
      await this.log.finish(id, outcome)
      this.wake(id)
    } catch (error) {
      this.logger.error({ err: error, resumableId: id }, 'tower-sse: a resumable stream\'s end could not be written; its followers learn it from the liveness deadline')
    }
  }

  /**
   * A log changed (null: any may have): wake its followers here. A producer here stops when its
   * log ended elsewhere (a cancel): only an end's notice is read for that, never an append's — its
   * own appends would cost it a read each.
   */
  private changed (id: string | null, ended: boolean): void {
    if (id === null) {
      for (const wakes of this.following.values()) for (const wake of wakes) wake()
      return
    }
    this.wake(id)
    const produced = this.produced.get(id)
    if (produced === undefined || !ended) return
    void this.log.read(id, Number.MAX_SAFE_INTEGER, 0).then((read) => {
      if (read === null || !read.meta.running) produced.controller.abort('cancelled')
    }, () => {})
  }

  /** Wakes the followers of `id` on this instance: they read the log from their cursors. */
  private wake (id: string): void {
    for (const wake of this.following.get(id) ?? []) wake()
  }

  /**
   * Every HEARTBEAT_MS: this instance's producers prove themselves alive; logs followed here whose
   * producer is silent end; and every follower reads again, so that a notice lost on the way (a
   * reconnecting listener) delays it by a second at most — never leaves it waiting for an end
   * that already came.
   */
  private prove (): void {
    for (const wakes of this.following.values()) for (const wake of wakes) wake()
    const mine = [...this.produced.keys()]
    if (mine.length > 0) this.log.heartbeat(mine).catch((error: unknown) => this.logger.warn({ err: error }, 'tower-sse: resumable producers could not prove themselves alive'))
    const followed = [...this.following.keys()].filter((id) => !this.produced.has(id))
    if (followed.length > 0) this.log.reap(followed, LIVENESS_MS).catch(() => {})
  }
}

/** The frame of a log entry, with its id. */
function frameOf (entry: LogEntry, id: string): Buffer {
  if (entry.kind === 'event') return encodeText(entry.event.data, entry.event.event, id, entry.event.retry)
  const { outcome } = entry
  if (outcome.kind === 'error') return encodeEvent({ event: 'error', id, data: { code: outcome.code } })
  return encodeEvent({ event: 'end', id, data: outcome.kind === 'cancelled' ? { reason: 'cancelled' } : {} })
}

function errorFrame (code: string): Buffer {
  return encodeEvent({ event: 'error', data: { code } })
}

/** An item of a producer as the log keeps it, checked as a broadcast's fields are. */
function logged (item: unknown): LoggedEvent {
  if (typeof item !== 'object' || item === null || !('data' in item)) {
    throw new TypeError(`tower-sse: a resumable stream's items must be events { data, event?, retry? }, got ${item === null ? 'null' : typeof item}`)
  }
  const { data, event, retry } = item as SseEvent
  if (event !== undefined) checkEventName(event)
  if (retry !== undefined && (!Number.isSafeInteger(retry) || retry < 0)) throw new TypeError(`tower-sse: retry must be a non-negative integer of ms, got ${String(retry)}`)
  return { data: dataText(data), ...(event === undefined ? {} : { event }), ...(retry === undefined ? {} : { retry }) }
}

/** `promise`'s value, or undefined once `signal` aborts. */
function abortable<T> (promise: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) return Promise.resolve(undefined)
  return new Promise((resolve, reject) => {
    const aborted = (): void => resolve(undefined)
    signal.addEventListener('abort', aborted, { once: true })
    promise.then((value) => {
      signal.removeEventListener('abort', aborted)
      resolve(value)
    }, (error: unknown) => {
      signal.removeEventListener('abort', aborted)
      reject(error)
    })
  })
}
