import { randomBytes } from 'node:crypto'
import { disconnectQuietly, whenReady, type RedisConnection } from '../bus/redis/connection'
import { keyPrefix } from '../bus/redis/keys'
import { MAX_LOG_ENTRIES, type LogChanged, type LogEntry, type LoggedEvent, type LogMeta, type LogOutcome, type LogRead, type ResumableLog } from './log'

/**
 * The resumable streams' logs in Redis, shared by every instance on the bus. Each stream has a
 * Redis Stream of its entries (ids `0-<seq>`) and a hash of its state, both under a hash tag of its
 * own — `{<key>:r:<id>}` — so that a Cluster spreads the streams over its slots. A script decides
 * each step atomically (create, append, end, heartbeat, reap), with Redis's own clock, and
 * publishes the stream's id on one channel: every instance hears that a log moved and reads it.
 * While its producer runs, a log is kept `ttlMs` past its last heartbeat; after its end, `ttlMs`.
 * A recorded log (`record`: no producer, no end) is kept `ttlMs` past its last append.
 */

/** The entries' fields: `d` data, `e` event, `r` retry; an end entry has `k` (done, cancelled, error) and, for an error, `c` its code. */
const CREATE = `
if redis.call('EXISTS', KEYS[1]) == 1 then
  local m = redis.call('HMGET', KEYS[1], 'o', 'st', 'n', 'l')
  return {0, m[1], m[2], m[3], m[4] or ''}
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'st', 'run', 'n', 0, 't', ARGV[2], 'h', now, 'p', ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'l', ARGV[4]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[5]))
return {1}
`

/**
 * Lua: the events from ARGV[first] on (each its data, event and retry) appended to KEYS[2] after
 * sequence `n`, as entries 0-<n+1>, 0-<n+2>, …, the stream trimmed near ARGV[maxLength] entries.
 */
function appendEvents (first: number, maxLength: number): string {
  return `local i = ${first}
while i <= #ARGV do
  n = n + 1
  local fields = {'d', ARGV[i]}
  if ARGV[i + 1] ~= '' then table.insert(fields, 'e'); table.insert(fields, ARGV[i + 1]) end
  if ARGV[i + 2] ~= '' then table.insert(fields, 'r'); table.insert(fields, ARGV[i + 2]) end
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[${maxLength}], '0-' .. n, unpack(fields))
  i = i + 3
end
`
}

/** ARGV: origin, MAXLEN, slack, channel, id, then each event's data, event and retry. */
const APPEND = `
local m = redis.call('HMGET', KEYS[1], 'st', 'p', 'n', 't')
if m[1] ~= 'run' or m[2] ~= ARGV[1] then return -1 end
local n = tonumber(m[3])
${appendEvents(6, 2)}local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'n', n, 'h', t[1] * 1000 + math.floor(t[2] / 1000))
local keep = tonumber(m[4]) + tonumber(ARGV[3])
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('PUBLISH', ARGV[4], ARGV[5])
return n
`

/**
 * An append from any instance to a log without a producer (an MCP stream): creates the log for
 * ARGV[1] when it is absent (no producer: its origin is empty, so no instance's heartbeat or own
 * end applies to it), refuses another owner's or an ended one, and keeps both keys ARGV[2] ms past
 * this append. ARGV: owner, ttl, label, MAXLEN, channel, id, then each event's data, event and retry.
 */
const RECORD = `
local m = redis.call('HMGET', KEYS[1], 'o', 'st', 'n')
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local n = 0
if not m[1] then
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'st', 'run', 'n', 0, 't', ARGV[2], 'h', now, 'p', '')
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'l', ARGV[3]) end
elseif m[1] ~= ARGV[1] or m[2] ~= 'run' then
  return -1
else
  n = tonumber(m[3])
end
${appendEvents(7, 4)}redis.call('HSET', KEYS[1], 'n', n, 'h', now)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return n
`

/**
 * The end entry, once: `own` by this instance's producer, `any` (a cancel) by anyone, `stale` only
 * when the producer has not proven itself alive for ARGV[5] ms. ARGV: origin, kind, code, mode,
 * stale ms, channel, id. Both keys then expire the log's ttl after its end.
 */
const FINISH = `
local m = redis.call('HMGET', KEYS[1], 'st', 'p', 'n', 'h', 't')
if m[1] ~= 'run' then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if ARGV[4] == 'own' and m[2] ~= ARGV[1] then return 0 end
if ARGV[4] == 'stale' and now - tonumber(m[4]) <= tonumber(ARGV[5]) then return 0 end
local n = tonumber(m[3]) + 1
if ARGV[2] == 'error' then
  redis.call('XADD', KEYS[2], '0-' .. n, 'k', 'error', 'c', ARGV[3])
else
  redis.call('XADD', KEYS[2], '0-' .. n, 'k', ARGV[2])
end
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'n', n)
redis.call('PEXPIRE', KEYS[1], m[5])
redis.call('PEXPIRE', KEYS[2], m[5])
redis.call('PUBLISH', ARGV[6], ARGV[7] .. ' end')
return 1
`

/** This instance's producer is alive: its heartbeat, and the log kept `ttl` past it. */
const HEARTBEAT = `
local m = redis.call('HMGET', KEYS[1], 'st', 'p', 't')
if m[1] ~= 'run' or m[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'h', t[1] * 1000 + math.floor(t[2] / 1000))
local keep = tonumber(m[3]) + tonumber(ARGV[2])
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return 1
`

type Command = (...args: Array<string | number>) => Promise<unknown>
type StreamEntry = [string, string[]]

/** A running log outlives its producer's last heartbeat by its ttl and this much. */
const RUNNING_SLACK_MS = 60_000

export class RedisLog implements ResumableLog {
  /** Tells this log's producers apart from another instance's. */
  private readonly origin = randomBytes(9).toString('base64url')
  private readonly channel: string
  private listener: RedisConnection | null = null
  private closed = false
  private readonly watchers: LogChanged[] = []

  /** `release`: closes `redis` when the log closes (a connection of its own); a connection lent to it stays open. */
  constructor (private readonly redis: RedisConnection, private readonly redisKey: string, private readonly release: () => void = () => {}) {
    this.channel = `${keyPrefix(redisKey)}:r-changed`
    redis.defineCommand('towerSseLogCreate', { numberOfKeys: 1, lua: CREATE })
    redis.defineCommand('towerSseLogAppend', { numberOfKeys: 2, lua: APPEND })
    redis.defineCommand('towerSseLogRecord', { numberOfKeys: 2, lua: RECORD })
    redis.defineCommand('towerSseLogFinish', { numberOfKeys: 2, lua: FINISH })
    redis.defineCommand('towerSseLogHeartbeat', { numberOfKeys: 2, lua: HEARTBEAT })
  }

  async secret (): Promise<Buffer> {
    // The first command, at start: its connection (no offline queue) is connected first.
    await whenReady(this.redis)
    const key = `${keyPrefix(this.redisKey)}:r-secret`
    await this.redis.set(key, randomBytes(32).toString('hex'), 'NX')
    const secret = await this.redis.get(key)
    if (secret === null) throw new Error('tower-sse: the resumable streams\' secret vanished from Redis')
    return Buffer.from(secret, 'hex')
  }

  async create (id: string, owner: string, ttlMs: number, label?: string): Promise<{ created: true } | { created: false, meta: LogMeta }> {
    this.listen()
    const [meta] = this.keys(id)
    const reply = await this.command('towerSseLogCreate')(meta, owner, ttlMs, this.origin, label ?? '', RUNNING_SLACK_MS) as [number, string?, string?, string?, string?]
    if (reply[0] === 1) return { created: true }
    return { created: false, meta: { owner: reply[1] ?? '', running: reply[2] === 'run', last: Number(reply[3]), label: reply[4] === '' ? undefined : reply[4] } }
  }

  async append (id: string, events: readonly LoggedEvent[]): Promise<number | null> {
    const [meta, log] = this.keys(id)
    const fields = events.flatMap((event) => [event.data, event.event ?? '', event.retry ?? ''])
    const last = await this.command('towerSseLogAppend')(meta, log, this.origin, MAX_LOG_ENTRIES, RUNNING_SLACK_MS, this.channel, id, ...fields) as number
    return last < 0 ? null : last
  }

  async record (id: string, owner: string, ttlMs: number, label: string, events: readonly LoggedEvent[]): Promise<number | null> {
    const [meta, log] = this.keys(id)
    const fields = events.flatMap((event) => [event.data, event.event ?? '', event.retry ?? ''])
    const last = await this.command('towerSseLogRecord')(meta, log, owner, ttlMs, label, MAX_LOG_ENTRIES, this.channel, id, ...fields) as number
    return last < 0 ? null : last
  }

  async finish (id: string, outcome: LogOutcome): Promise<boolean> {
    return await this.end(id, outcome, outcome.kind === 'cancelled' ? 'any' : 'own', 0)
  }

  async read (id: string, after: number, limit: number): Promise<LogRead | null> {
    this.listen()
    const [meta, log] = this.keys(id)
    const pipeline = this.redis.multi().hmget(meta, 'o', 'st', 'n', 'l').xrange(log, '-', '+', 'COUNT', 1)
    if (limit > 0) pipeline.xrange(log, `(0-${after}`, '+', 'COUNT', limit)
    const replies = await pipeline.exec()
    if (replies === null) throw new Error('tower-sse: a resumable stream\'s read was aborted')
    for (const [error] of replies) if (error !== null) throw error
    const [o, st, n, l] = replies[0][1] as Array<string | null>
    if (o === null) return null
    const oldest = replies[1][1] as StreamEntry[]
    const entries = limit > 0 ? (replies[2][1] as StreamEntry[]).map(entryOf) : []
    const first = oldest.length === 0 ? Number(n) + 1 : seqOf(oldest[0][0])
    return { meta: { owner: o, running: st === 'run', last: Number(n), label: l ?? undefined }, entries, first }
  }

  watch (changed: LogChanged): void {
    this.watchers.push(changed)
  }

  /**
   * Starts hearing which logs moved, the first time a log is created or read: an app that never
   * streams a resumable answer holds no connection for it. Its own connection: one in subscribe
   * mode takes no other command. A notice lost while it reconnects only delays a reader: every
   * follower also reads again each second.
   */
  private listen (): void {
    if (this.listener !== null || this.closed) return
    const listener = (this.redis as { duplicate: () => RedisConnection }).duplicate()
    this.listener = listener
    listener.on('error', () => {})
    // An append's notice is the log's id; an end's, the id and " end" (ids hold no space).
    listener.on('message', (_channel: string, notice: string) => {
      const ended = notice.endsWith(' end')
      const id = ended ? notice.slice(0, -' end'.length) : notice
      for (const watcher of this.watchers) watcher(id, ended)
    })
    // On each connect (the bus's connections queue nothing while down): subscribing twice is harmless.
    listener.on('ready', () => {
      // Whatever moved before this subscription (or while it was down) was not heard: every reader reads again.
      listener.subscribe(this.channel).then(() => { for (const watcher of this.watchers) watcher(null, false) }, () => {})
    })
    if (listener.status === 'wait') listener.connect().catch(() => {})
  }

  async heartbeat (ids: readonly string[]): Promise<void> {
    // One command each, back to back on the connection: a Cluster takes no pipeline across slots.
    const beat = this.command('towerSseLogHeartbeat')
    await Promise.all(ids.map(async (id) => await beat(...this.keys(id), this.origin, RUNNING_SLACK_MS)))
  }

  async reap (ids: readonly string[], silentMs: number): Promise<void> {
    await Promise.all(ids.map(async (id) => await this.end(id, { kind: 'error', code: 'TOWER_SSE_PRODUCER_LOST' }, 'stale', silentMs)))
  }

  async close (): Promise<void> {
    this.closed = true
    if (this.listener !== null) disconnectQuietly(this.listener)
    this.listener = null
    this.release()
  }

  private async end (id: string, outcome: LogOutcome, mode: 'own' | 'any' | 'stale', staleMs: number): Promise<boolean> {
    const [meta, log] = this.keys(id)
    const ended = await this.command('towerSseLogFinish')(meta, log, this.origin, outcome.kind, outcome.kind === 'error' ? outcome.code : '', mode, staleMs, this.channel, id)
    return ended === 1
  }

  /** The stream's state and its entries, under one hash tag of its own. */
  private keys (id: string): [string, string] {
    const tag = `{${this.redisKey}:r:${id}}`
    return [`${tag}:meta`, `${tag}:log`]
  }

  private command (name: string): Command {
    return (this.redis as unknown as Record<string, Command>)[name].bind(this.redis)
  }
}

function seqOf (streamId: string): number {
  return Number(streamId.slice(streamId.indexOf('-') + 1))
}

function entryOf ([streamId, fields]: StreamEntry): LogEntry {
  const field = (name: string): string | undefined => {
    for (let i = 0; i < fields.length; i += 2) if (fields[i] === name) return fields[i + 1]
    return undefined
  }
  const seq = seqOf(streamId)
  const kind = field('k')
  if (kind === undefined) {
    const event = field('e')
    const retry = field('r')
    return { seq, kind: 'event', event: { data: field('d') ?? '', ...(event === undefined ? {} : { event }), ...(retry === undefined ? {} : { retry: Number(retry) }) } }
  }
  if (kind === 'error') return { seq, kind: 'end', outcome: { kind: 'error', code: field('c') ?? 'TOWER_SSE_STREAM_FAILED' } }
  return { seq, kind: 'end', outcome: { kind: kind === 'cancelled' ? 'cancelled' : 'done' } }
}
