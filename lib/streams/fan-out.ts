import type { Bus, BusEvent } from '../bus/bus'
import type { StreamStats } from '../observe/stats'
import type { Subscriber } from './subscriber'
import type { Registry } from './registry'
import { encodeEvent, encodeText } from '../events/encoder'
import { formatEventId, type EventPosition, type ParsedEventId } from '../bus/event-id'
import { History, type HistoryEntry } from '../events/history'
import type { HistorySettings } from '../events/history-options'
import type { RandomSource } from '../shared/clocks'
import { Resumes } from '../events/resume'
import { ALL_TOPICS } from '../events/topic'

/** Takes the time one event's fan-out took here, in seconds. */
export type BroadcastObserver = (seconds: number) => void

/**
 * What the bus delivers, to every open stream: each event encoded once into a Buffer that the
 * ring and every stream share, queued for each without waiting on any. Also what a stream that
 * resumes is owed (a replay from the ring or the bus, or a resync), and what the streams are told
 * when the bus cannot vouch for continuity or cannot prove it receives.
 */
export class FanOut {
  history: History
  private readonly resumes: Resumes
  private last: { id: string, position: EventPosition } | null = null
  private observe: BroadcastObserver | null = null

  constructor (
    private readonly registry: Registry,
    readonly bus: Bus,
    private readonly limits: Pick<HistorySettings, 'events' | 'bytes'>,
    private readonly stats: StreamStats,
    random: RandomSource
  ) {
    this.history = new History(limits.events, limits.bytes, null)
    this.resumes = new Resumes(this, stats, random)
  }

  /** Subscribes to the bus: from then on every event it delivers is fanned out here. */
  async start (): Promise<void> {
    const from = await this.bus.subscribe((event) => this.deliver(event), (at, reason) => this.lost(at, reason), () => this.deafened())
    this.history = new History(this.limits.events, this.limits.bytes, from.floor)
    this.last ??= from.last
  }

  /** The id of the newest event delivered here, or null before the first. */
  get lastEventId (): string | null {
    return this.last === null ? null : this.last.id
  }

  lastPosition (): EventPosition | null {
    return this.last === null ? null : this.last.position
  }

  /**
   * What a stream that just opened is owed: nothing (no Last-Event-ID), a resync (an id the bus
   * never issued), or what it missed — from
   * the ring in the same turn, or after one shared bus read with its live events held meanwhile.
   */
  resume (subscriber: Subscriber, from: ParsedEventId | 'foreign' | null): void {
    if (from === null) {
      this.stats.resumed('fresh', 0)
    } else if (from === 'foreign') {
      // Not an id of the bus: what the client missed since cannot be known.
      this.stats.resumed('resync', 0)
      subscriber.write(this.resyncFrame('unknown', subscriber))
    } else {
      this.resumes.start(subscriber, from)
    }
  }

  /**
   * Times every event's fan-out from now on (set only when metrics are on: no cost otherwise): two
   * clock reads and one call per event, nothing per stream and nothing allocated.
   */
  timeBroadcasts (observe: BroadcastObserver): void {
    this.observe = observe
  }

  /**
   * `event: resync` for `subscriber`, carrying the newest id it is entitled to: that of the newest
   * event in the ring it would have been sent (ids count every event, so the newest id of all
   * would tell it how much other topics carried). None in the ring: no id, and the stream keeps
   * its own, so its next resume is told again rather than skip a gap.
   */
  resyncFrame (reason: string, subscriber: Subscriber): Buffer {
    return this.resyncFrames(reason)(subscriber)
  }

  /** resyncFrame() for many streams at once: each distinct frame is encoded once. */
  private resyncFrames (reason: string): (subscriber: Subscriber) => Buffer {
    const frames = new Map<string | null, Buffer>()
    return (subscriber) => {
      const latest = subscriber.grant === ALL_TOPICS ? this.lastEventId : idOf(this.history.newest((topic) => subscriber.wants(topic)))
      let frame = frames.get(latest)
      if (frame === undefined) {
        frame = encodeEvent({ event: 'resync', id: latest ?? undefined, data: { reason, lastEventId: latest } })
        frames.set(latest, frame)
      }
      return frame
    }
  }

  /** The frame of a bus event as every stream gets it (encoded once per instance). */
  frameOf (event: BusEvent): HistoryEntry {
    const text = event.idProperty === undefined ? event.data : withId(event.data, event.idProperty, event.id)
    return { position: event.position, topic: event.topic, frame: encodeText(text, event.event, event.id) }
  }

  /** The bus's one delivery callback. Returns how many streams took the event. */
  private deliver (event: BusEvent): number {
    const observe = this.observe
    const started = observe === null ? 0 : performance.now()
    const entry = this.frameOf(event)
    this.history.push(entry)
    this.last = event
    const { topic, frame } = entry
    let delivered = 0
    for (const subscriber of this.registry.all()) {
      if (this.resumes.active && this.resumes.intercept(subscriber, entry)) continue
      if (subscriber.wants(topic) && subscriber.write(frame)) delivered++
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
    this.history = new History(this.limits.events, this.limits.bytes, at.position)
    this.last = at
    const frame = this.resyncFrames(reason)
    for (const subscriber of this.registry.all()) {
      // A stream that carries no broadcast has lost none (and a bus id would replace its own).
      if (!subscriber.broadcasts || this.resumes.survives(subscriber, at.position)) continue
      this.resumes.forget(subscriber)
      subscriber.write(frame(subscriber))
    }
  }

  /**
   * This instance cannot prove it receives from the bus: every stream gets a resync (what it has
   * seen may not be all there is) and ends with its own jittered `retry:`, so its client reconnects —
   * to a healthy instance behind a load balancer that reads the readiness of each, or here again,
   * resuming from its id, once the bus is back. Never a stream left silent.
   */
  private deafened (): void {
    const frame = this.resyncFrames('bus-deaf')
    for (const subscriber of [...this.registry.all()]) {
      this.resumes.forget(subscriber)
      if (subscriber.broadcasts) subscriber.write(frame(subscriber))
      subscriber.end('busDeaf')
    }
  }

  /** Stops the bus and any resume still waiting on it; the streams are drained separately. */
  async close (): Promise<void> {
    this.resumes.close()
    await this.bus.close()
  }
}

function idOf (entry: HistoryEntry | undefined): string | null {
  return entry === undefined ? null : formatEventId(entry.position)
}

/** `{"<name>":"<id>", …rest of the object}`: the JSON text of the data with the id first. */
function withId (text: string, name: string, id: string): string {
  const head = `{${JSON.stringify(name)}:${JSON.stringify(id)}`
  return text === '{}' ? `${head}}` : `${head},${text.slice(1)}`
}
