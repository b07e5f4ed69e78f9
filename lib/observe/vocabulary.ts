/**
 * The vocabulary: every refusal reason, close cause and resume outcome, once. Counters, the log
 * line, the metrics' labels and the refusal codes are all derived from these tables, so a new
 * reason is one row here (plus the check in admission that decides it). A leaf: it imports nothing.
 */

/** Why admission refused a stream request: its error code, status and the message's text. */
export const REFUSALS = {
  capacity: { code: 'TOWER_SSE_CAPACITY', status: 503, message: (l: RefusalLimits) => `all ${l.capacity} event streams are in use` },
  perKey: { code: 'TOWER_SSE_PER_KEY', status: 429, message: (l: RefusalLimits) => `this client already holds ${l.perKey} event streams` },
  pressure: { code: 'TOWER_SSE_PRESSURE', status: 503, message: () => 'the server is under pressure' },
  rate: { code: 'TOWER_SSE_RATE', status: 503, message: () => 'too many new event streams per second' },
  closing: { code: 'TOWER_SSE_CLOSING', status: 503, message: () => 'the server is shutting down' },
  /** This instance cannot prove it receives the bus's events (see bus-guarantees.md): a stream here could not be fed. */
  busDeaf: { code: 'TOWER_SSE_BUS_DEAF', status: 503, message: () => 'this instance cannot prove it receives the event bus; another instance may serve you' },
  /** A resumable stream's log (see resumable-streams.md) cannot be reached now: nothing could feed the stream. */
  logUnavailable: { code: 'TOWER_SSE_LOG_UNAVAILABLE', status: 503, message: () => 'the log of resumable streams cannot be reached now' },
  pipelined: {
    code: 'TOWER_SSE_PIPELINED',
    status: 503,
    message: () => 'an event stream needs a connection of its own; this request was pipelined behind another'
  }
} as const

/** What a refusal message may name. */
export interface RefusalLimits {
  capacity: number
  perKey: number
}

export type RefusalReason = keyof typeof REFUSALS
export const REFUSAL_REASONS = Object.keys(REFUSALS) as RefusalReason[]

/** How a stream ended (stats() field → the `cause` label of tower_sse_disconnects_total). */
export const CLOSE_CAUSES = {
  disconnected: 'client',
  expired: 'expired',
  deadSwept: 'swept',
  dropped: 'dropped',
  shutdown: 'shutdown',
  /** Told and closed while the bus could not prove this instance receives (see bus-guarantees.md). */
  busDeaf: 'bus-deaf',
  /** Closed by the app (`fastify.sse.close({ id } | { key }, reason)`): a revoked grant or token, a logout. */
  revoked: 'revoked',
  logout: 'logout',
  /** Past the `expiresAt` its subscribe() was given (a token's `exp`). */
  credentialsExpired: 'credentials-expired',
  /**
   * Its per-request stream (subscribe's `stream`) failed: logged, told (`event: error`), closed with a
   * retry; or its resumable log could not be reached: closed with a retry, to ask again.
   */
  streamFailed: 'stream-failed',
  /** Its answer is complete: its per-request stream finished, or the app ended it (`handle.end()`). */
  ended: 'ended'
} as const
export type CloseReason = keyof typeof CLOSE_CAUSES
export const CLOSE_REASONS = Object.keys(CLOSE_CAUSES) as CloseReason[]
/** Why the app may close streams itself (`fastify.sse.close({ id } | { key }, reason)`). */
export const APP_CLOSE_REASONS = ['revoked', 'logout'] as const
export type AppCloseReason = typeof APP_CLOSE_REASONS[number]

/** How an admitted stream started: resumed from history, told to resync, or with no Last-Event-ID. */
export const RESUME_OUTCOMES = ['replayed', 'resync', 'fresh'] as const
export type ResumeOutcome = typeof RESUME_OUTCOMES[number]

/** What happens to streams, counted both since start and in the current log window. */
export const ACTIVITY_KINDS = ['accepted', 'rejected', 'tarpitted', ...CLOSE_REASONS] as const
export type ActivityKind = 'accepted' | 'rejected' | 'tarpitted' | CloseReason
export type ActivityCounts = Record<ActivityKind, number>

/** What admission holds now: refusals in the tarpit and the storm's widening level (delays × 2^level). */
export interface AdmissionGauges {
  refusalsHeld: number
  stormLevel: number
}

/** What the registry holds now (read when stats() is asked, never counted). */
export interface StreamGauges {
  current: number
  capacity: number
  historyEvents: number
  historyBytes: number
  /** Frame bytes queued on the streams still open. */
  openStreamBytes: number
  bus: BusStats
}

export interface SseStats extends ActivityCounts, AdmissionGauges {
  current: number
  peak: number
  capacity: number
  /** Events fanned out to streams here: this instance's broadcasts and, with a shared bus, every instance's. */
  events: number
  /** How many of them the local ring still holds for replay, and their bytes. */
  historyEvents: number
  historyBytes: number
  /** `rejected`, by reason. */
  refusals: Record<RefusalReason, number>
  /** `accepted`, by how the stream started. */
  resumes: Record<ResumeOutcome, number>
  /** Events sent from history to resuming clients. */
  replayedEvents: number
  /** broadcast() calls made here that published an event. */
  broadcasts: number
  /** Streams that never opened because a hook or callback threw or their first event could not be encoded (each answered 500). */
  failedOpens: number
  /** Frame bytes queued on streams (retry, events, heartbeats, replays; not headers, not refusals). */
  bytesSent: number
  /** The bus: memory or redis, up or down, history reads made for resumes, delivery lag. */
  bus: BusStats
}

/** A record with a zero for each name. */
export function zeros<K extends string> (names: readonly K[]): Record<K, number> {
  return Object.fromEntries(names.map((name) => [name, 0])) as Record<K, number>
}

/** The bus's part of the stats shape (a bus's stats() answers it). */
export interface BusStats {
  kind: 'memory' | 'redis'
  /** 'down' while the bus cannot publish or read, 'oom' while Redis refuses writes for memory; streams stay open meanwhile. */
  state: 'up' | 'down' | 'oom'
  /** Events delivered to this instance's subscriber so far. */
  delivered: number
  /** History reads the bus made for resuming clients (one per shared range). */
  reads: number
  /** Milliseconds between the newest delivered event's publication and its delivery here. */
  lagMs: number
  /** Times this instance could not prove continuity (lost, trimmed or rolled-back events) and resynced its streams. */
  discontinuities: number
  /** Publishes Redis refused with an error (out of memory among them): broadcasts that failed there. */
  refusedPublishes: number
}
