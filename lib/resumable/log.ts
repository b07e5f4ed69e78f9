/**
 * The contract of a resumable stream's log: the events one producer appends, in order, readable by
 * any instance after any sequence number, ended once, expiring a while after the end — or, for a
 * log written by `record` (tower-sse/mcp's), by any instance and expiring a while after its last
 * event. The memory log serves one process; the Redis log every instance sharing the bus.
 */

/** One event as the log keeps it: the text of its data, its name and `retry:`; its id comes from its place. */
export interface LoggedEvent {
  readonly data: string
  readonly event?: string
  readonly retry?: number
}

/** How a log ended: complete, cancelled by the app, failed by its producer, or its producer gone. */
export type LogOutcome =
  | { readonly kind: 'done' }
  | { readonly kind: 'cancelled' }
  | { readonly kind: 'error', readonly code: string }

export type LogEntry =
  | { readonly seq: number, readonly kind: 'event', readonly event: LoggedEvent }
  /** The last entry: the outcome (an error's code, or the end). */
  | { readonly seq: number, readonly kind: 'end', readonly outcome: LogOutcome }

export interface LogMeta {
  /** The owner's hash (see ownerHash). */
  readonly owner: string
  /** Whether a producer still appends (false once the end entry is written). */
  readonly running: boolean
  /** The newest sequence number written (0: none yet). */
  readonly last: number
  /** What the app named the stream for its own lookups (an MCP stream id), if anything. */
  readonly label: string | undefined
}

export interface LogRead {
  readonly meta: LogMeta
  /** Entries after the sequence number asked for, in order, at most the limit asked for. */
  readonly entries: readonly LogEntry[]
  /** The oldest sequence number the log still holds (entries before it were trimmed). */
  readonly first: number
}

/** A log moved: `id` appended to or ended (`ended`), or null when any may have moved unheard. */
export type LogChanged = (id: string | null, ended: boolean) => void

/** Entries a log keeps at most; a resume from before the oldest kept gets a resync. */
export const MAX_LOG_ENTRIES = 100_000

export interface ResumableLog {
  /** The secret the ids are sealed with, the same on every instance sharing the log. */
  secret: () => Promise<Buffer>
  /**
   * Creates the log of `id` for `owner`, its producer on this instance, expiring `ttlMs` after its
   * end — unless it exists: then what it holds. A log found expired counts as absent.
   */
  create: (id: string, owner: string, ttlMs: number, label?: string) => Promise<{ created: true } | { created: false, meta: LogMeta }>
  /** Appends events of this instance's producer; resolves with the last sequence number, or null once the log no longer runs (cancelled, or its producer declared gone). */
  append: (id: string, events: readonly LoggedEvent[]) => Promise<number | null>
  /**
   * Appends events to a log that has no producer and no end, from any instance: creates the log of
   * `id` for `owner` (named `label`) when there is none, and keeps it `ttlMs` past this append, not
   * past an end — an MCP stream, whose SDK never says a stream is over. Resolves with the last
   * sequence number, or null when the log is another owner's or no longer runs (cancelled).
   * Appends run in the order they are called on one instance; across instances, in the order the
   * log receives them.
   */
  record: (id: string, owner: string, ttlMs: number, label: string, events: readonly LoggedEvent[]) => Promise<number | null>
  /**
   * Writes the end entry: `done` or `error` by the producer, `cancelled` by any instance. Resolves
   * false when the log had already ended (or is gone).
   */
  finish: (id: string, outcome: LogOutcome) => Promise<boolean>
  /** Entries after `after`, at most `limit`; null when there is no such log (never was, or expired). */
  read: (id: string, after: number, limit: number) => Promise<LogRead | null>
  /**
   * Calls `changed(id, ended)` whenever a log is appended to (`ended` false) or ended (true), on any
   * instance: a hint to read; `changed(null, false)` when any log may have moved unheard (a shared
   * log's listener just (re)connected).
   */
  watch: (changed: LogChanged) => void
  /** Proves this instance's producers of `ids` alive (a shared log; the memory log has nothing to prove). */
  heartbeat: (ids: readonly string[]) => Promise<void>
  /** Ends, as `error` TOWER_SSE_PRODUCER_LOST, each log of `ids` still running whose producer has not proven itself alive for `silentMs`. */
  reap: (ids: readonly string[], silentMs: number) => Promise<void>
  close: () => Promise<void>
}
