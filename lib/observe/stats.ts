import {
  ACTIVITY_KINDS, REFUSAL_REASONS, RESUME_OUTCOMES, zeros,
  type ActivityCounts, type AdmissionGauges, type CloseReason, type RefusalReason, type ResumeOutcome, type SseStats, type StreamGauges
} from './vocabulary'

/** Distinct keys remembered per window for the storm warning; the rest are counted as "other". */
const MAX_KEYS_PER_WINDOW = 1000

/** What happened in one log window: its counts, its peak of open streams, attempts by key. */
export interface StatsWindow {
  counts: ActivityCounts
  peak: number
  attemptsByKey: ReadonlyMap<string, number>
}

/**
 * The one owner of the plugin's counts. Admission, the registry and resumes report what happened
 * through its methods; stats(), the log summary and the metrics read it. Nothing else writes a
 * count (under-pressure keeps its state in one closure the same way).
 */
export class StreamStats {
  private readonly totals: ActivityCounts = zeros(ACTIVITY_KINDS)
  private readonly refusals = zeros(REFUSAL_REASONS)
  private readonly resumes = zeros(RESUME_OUTCOMES)
  private replayedEvents = 0
  private events = 0
  private broadcasts = 0
  private failedOpens = 0
  private peak = 0
  /** Bytes queued on streams that have since closed (the open ones' are a gauge). */
  private closedStreamBytes = 0
  private window: ActivityCounts = zeros(ACTIVITY_KINDS)
  private windowPeak = 0
  private attemptsByKey = new Map<string, number>()

  /** One connection attempt by `key`, admitted or not. */
  attempt (key: string): void {
    const known = this.attemptsByKey.get(key)
    if (known !== undefined) this.attemptsByKey.set(key, known + 1)
    else if (this.attemptsByKey.size < MAX_KEYS_PER_WINDOW) this.attemptsByKey.set(key, 1)
  }

  refused (reason: RefusalReason): void {
    this.count('rejected')
    this.refusals[reason]++
  }

  /** A refusal held in the tarpit before its answer. */
  tarpitted (): void {
    this.count('tarpitted')
  }

  /** A stream admitted; `size` is the number open with it. */
  accepted (size: number): void {
    this.count('accepted')
    if (size > this.peak) this.peak = size
    if (size > this.windowPeak) this.windowPeak = size
  }

  resumed (outcome: ResumeOutcome, replayedEvents: number): void {
    this.resumes[outcome]++
    this.replayedEvents += replayedEvents
  }

  /** A stream is over, having been handed `bytesQueued` frame bytes. */
  closed (cause: CloseReason, bytesQueued: number): void {
    this.count(cause)
    this.closedStreamBytes += bytesQueued
  }

  /** One event fanned out to this instance's streams. */
  delivered (): void {
    this.events++
  }

  /** A stream that never opened: a hook or callback threw, or its first event could not be encoded. */
  failedOpen (): void {
    this.failedOpens++
  }

  /** One broadcast() call here published an event. */
  broadcast (): void {
    this.broadcasts++
  }

  /** stats(): the counts with what the registry and admission hold now. */
  read (streams: StreamGauges, admission: AdmissionGauges): SseStats {
    const { openStreamBytes, ...held } = streams
    return {
      ...held,
      peak: this.peak,
      ...this.totals,
      events: this.events,
      refusals: { ...this.refusals },
      resumes: { ...this.resumes },
      replayedEvents: this.replayedEvents,
      broadcasts: this.broadcasts,
      failedOpens: this.failedOpens,
      bytesSent: this.closedStreamBytes + openStreamBytes,
      ...admission
    }
  }

  /** The window that just ended, for the log summary; a new one starts with `current` streams open. */
  takeWindow (current: number): StatsWindow {
    const ended = { counts: this.window, peak: Math.max(this.windowPeak, current), attemptsByKey: this.attemptsByKey }
    this.window = zeros(ACTIVITY_KINDS)
    this.windowPeak = current
    this.attemptsByKey = new Map()
    return ended
  }

  private count (kind: keyof ActivityCounts): void {
    this.totals[kind]++
    this.window[kind]++
  }
}
