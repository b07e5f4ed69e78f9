import { randomBytes } from 'node:crypto'
import { MAX_LOG_ENTRIES, type LogChanged, type LogEntry, type LoggedEvent, type LogMeta, type LogOutcome, type LogRead, type ResumableLog } from './log'

interface Kept {
  owner: string
  label: string | undefined
  ttlMs: number
  entries: LogEntry[]
  /** The sequence number of entries[0] (entries before it were trimmed). */
  first: number
  last: number
  running: boolean
  expiry: NodeJS.Timeout | undefined
}

/**
 * The logs of one process: the producer and every reader are here, so nothing can go silent
 * separately. A log lives until `ttlMs` after its end, or a recorded one after its last append (a
 * timer of its own, unref'd).
 */
export class MemoryLog implements ResumableLog {
  private readonly logs = new Map<string, Kept>()
  private readonly watchers: LogChanged[] = []
  private readonly key = randomBytes(32)

  async secret (): Promise<Buffer> {
    return this.key
  }

  async create (id: string, owner: string, ttlMs: number, label?: string): Promise<{ created: true } | { created: false, meta: LogMeta }> {
    const kept = this.logs.get(id)
    if (kept !== undefined) return { created: false, meta: metaOf(kept) }
    this.logs.set(id, { owner, label, ttlMs, entries: [], first: 1, last: 0, running: true, expiry: undefined })
    return { created: true }
  }

  async append (id: string, events: readonly LoggedEvent[]): Promise<number | null> {
    const kept = this.logs.get(id)
    if (kept === undefined || !kept.running) return null
    return this.push(id, kept, events)
  }

  async record (id: string, owner: string, ttlMs: number, label: string, events: readonly LoggedEvent[]): Promise<number | null> {
    let kept = this.logs.get(id)
    if (kept === undefined) {
      kept = { owner, label, ttlMs, entries: [], first: 1, last: 0, running: true, expiry: undefined }
      this.logs.set(id, kept)
    } else if (kept.owner !== owner || !kept.running) {
      return null
    }
    const last = this.push(id, kept, events)
    // Kept ttlMs past this append: one timer per log, restarted.
    if (kept.expiry === undefined) kept.expiry = this.expire(id, kept)
    else kept.expiry.refresh()
    return last
  }

  async finish (id: string, outcome: LogOutcome): Promise<boolean> {
    const kept = this.logs.get(id)
    if (kept === undefined || !kept.running) return false
    kept.running = false
    kept.entries.push({ seq: ++kept.last, kind: 'end', outcome })
    clearTimeout(kept.expiry)
    kept.expiry = this.expire(id, kept)
    this.changed(id, true)
    return true
  }

  async read (id: string, after: number, limit: number): Promise<LogRead | null> {
    const kept = this.logs.get(id)
    if (kept === undefined) return null
    const from = Math.max(0, after + 1 - kept.first)
    return { meta: metaOf(kept), entries: kept.entries.slice(from, from + limit), first: kept.first }
  }

  watch (changed: LogChanged): void {
    this.watchers.push(changed)
  }

  async heartbeat (): Promise<void> {}

  async reap (): Promise<void> {}

  async close (): Promise<void> {
    for (const kept of this.logs.values()) clearTimeout(kept.expiry)
    this.logs.clear()
  }

  private push (id: string, kept: Kept, events: readonly LoggedEvent[]): number {
    for (const event of events) kept.entries.push({ seq: ++kept.last, kind: 'event', event })
    const over = kept.entries.length - MAX_LOG_ENTRIES
    if (over > 0) {
      kept.entries.splice(0, over)
      kept.first += over
    }
    this.changed(id, false)
    return kept.last
  }

  /** Deletes the log `ttlMs` from now (unless another log of its id took its place). */
  private expire (id: string, kept: Kept): NodeJS.Timeout {
    return setTimeout(() => { if (this.logs.get(id) === kept) this.logs.delete(id) }, kept.ttlMs).unref()
  }

  private changed (id: string, ended: boolean): void {
    // After the caller's await resumes, as a shared log's notice would come: never inside append().
    queueMicrotask(() => { for (const watcher of this.watchers) watcher(id, ended) })
  }
}

function metaOf (kept: Kept): LogMeta {
  return { owner: kept.owner, running: kept.running, last: kept.last, label: kept.label }
}
