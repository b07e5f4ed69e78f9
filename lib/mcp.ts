// `tower-sse/mcp`: an MCP `EventStore` (the Streamable HTTP transport's resumability, in
// @modelcontextprotocol/sdk) kept in the plugin's own resumable log — in this process, or in Redis
// for every instance on the bus. The SDK's interface is implemented by shape: nothing here imports
// the SDK, which stays the app's dependency, never this package's.
import { createHash } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { sseOf } from './streams/sse-of'
import { sharedLogOf, type SharedLog } from './resumable/shared-log'
import { IdSeal, ownerHash, parseResumableEventId } from './resumable/resumable-id'
import type { LogRead } from './resumable/log'
import { group, integer, MAX_TIMER_MS, optionalFunction, TowerSseOptionError } from './shared/option-rules'

/** A JSON-RPC message, as the SDK hands one to the store and takes it back on a replay. */
export interface McpMessage { [key: string]: unknown }

export interface McpEventStoreOptions {
  /**
   * Whose streams these are: the authenticated principal, with the session's id when the app keeps
   * sessions (`${user}\0${sessionId}`). A log's id is derived from the owner and the SDK's stream
   * id, and its event ids are sealed for the owner: another owner's event id finds nothing.
   */
  owner: string
  /** How long a stream's events are kept after its last one, in ms. Default 10 minutes. */
  ttlMs?: number
  /**
   * After the replay, keep sending what the log receives (from the instance that runs the request)
   * until the request's JSON-RPC response, the log's expiry or `close()`. For a transport that only
   * serves resumptions (stateless, or a session held by another instance); never for the transport
   * that runs the request, whose SDK delivers the rest itself. Default false: replay only, as the
   * SDK's own stores do.
   */
  follow?: boolean
  /**
   * With `follow`: called (once per replay, after the SDK has answered it) when this store has
   * nothing more to send on that stream — its response sent, the log expired, `close()`d or the
   * plugin closing. Close the transport that served the replay here, so the client's GET ends.
   */
  onFollowEnd?: (streamId: string) => void
}

/** The SDK's `EventStore` (storeEvent, getStreamIdForEventId, replayEventsAfter), and `close()`. */
export interface McpEventStore {
  /** Appends `message` to the log of (owner, `streamId`), creating it; resolves with its sealed event id. */
  storeEvent: (streamId: string, message: McpMessage) => Promise<string>
  /** The SDK's stream id of an event id of this owner's, or undefined (another owner's, forged, expired). */
  getStreamIdForEventId: (eventId: string) => Promise<string | undefined>
  /**
   * Sends every message stored after `lastEventId`, in order, once, and resolves with the SDK's
   * stream id; with `follow`, goes on sending after it resolves. Rejects for an event id that is not
   * this owner's, whose log has expired, or whose next events were trimmed (never skips silently).
   */
  replayEventsAfter: (lastEventId: string, options: { send: (eventId: string, message: McpMessage) => Promise<void> }) => Promise<string>
  /** Stops following: call it when the transport this store serves closes. */
  close: () => void
}

/** Entries read from the log at once. */
const PAGE = 500
/** Followers read again this often, so that a change notice lost on the way delays one by this much at most. */
const REREAD_MS = 1000
const DEFAULT_TTL_MS = 10 * 60_000
const OPTIONS = ['owner', 'ttlMs', 'follow', 'onFollowEnd']

/** One plugin's log as MCP stores use it: its id seal, one watcher, the followers on this instance. */
class McpLog {
  private seal: Promise<IdSeal> | null = null
  private readonly followers = new Map<string, Set<() => void>>()
  private timer: NodeJS.Timeout | undefined

  constructor (readonly shared: SharedLog) {
    shared.log.watch((id) => {
      if (id === null) this.wakeAll()
      else for (const wake of this.followers.get(id) ?? []) wake()
    })
    shared.closing.addEventListener('abort', () => this.wakeAll(), { once: true })
  }

  get log (): SharedLog['log'] {
    return this.shared.log
  }

  async sealer (): Promise<IdSeal> {
    this.seal ??= this.shared.log.secret().then((secret) => new IdSeal(secret), (error: unknown) => {
      this.seal = null
      throw error
    })
    return await this.seal
  }

  /** Registers a follower's wake for log `id`; the function returned removes it. */
  follow (id: string, wake: () => void): () => void {
    const wakes = this.followers.get(id) ?? new Set()
    this.followers.set(id, wakes)
    wakes.add(wake)
    this.timer ??= setInterval(() => this.wakeAll(), REREAD_MS).unref()
    return () => {
      wakes.delete(wake)
      if (wakes.size === 0 && this.followers.get(id) === wakes) this.followers.delete(id)
      if (this.followers.size === 0) {
        clearInterval(this.timer)
        this.timer = undefined
      }
    }
  }

  private wakeAll (): void {
    for (const wakes of this.followers.values()) for (const wake of wakes) wake()
  }
}

const mcpLogs = new WeakMap<SharedLog, McpLog>()

function mcpLogOf (app: FastifyInstance): McpLog {
  const shared = sharedLogOf(sseOf(app))
  if (shared === undefined) throw new Error('tower-sse/mcp: this app\'s fastify.sse is not a registered tower-sse\'s')
  let side = mcpLogs.get(shared)
  if (side === undefined) {
    side = new McpLog(shared)
    mcpLogs.set(shared, side)
  }
  return side
}

/**
 * The log of an owner's SDK stream: a hash of both, so that two owners (or two sessions) never share
 * one — the SDK names every session's standalone GET stream alike. `mcp-` keeps these ids apart
 * from the app's own resumable ids.
 */
function logIdOf (ownerKey: string, streamId: string): string {
  return `mcp-${createHash('sha256').update(`${ownerKey}\0${streamId}`).digest('base64url').slice(0, 32)}`
}

/** The message of a log entry, or null for one that carries none (the SDK's priming event, `{}`). */
function messageOf (data: string): McpMessage | null {
  const parsed: unknown = JSON.parse(data)
  return typeof parsed === 'object' && parsed !== null && 'jsonrpc' in parsed ? parsed as McpMessage : null
}

/** A JSON-RPC response (a result or an error): the last message of a request's stream. */
function isResponse (message: McpMessage): boolean {
  return 'id' in message && ('result' in message || 'error' in message)
}

interface Found {
  /** The log's id. */
  readonly id: string
  /** The SDK's stream id (the log's label). */
  readonly streamId: string
  /** The sequence number of the event the client has. */
  readonly after: number
  readonly seal: string
}

/**
 * An MCP `EventStore` for the Streamable HTTP server transport of `@modelcontextprotocol/sdk`, on the
 * log of the tower-sse registered on `app`: one store per transport, for one owner.
 *
 * ```ts
 * new StreamableHTTPServerTransport({ sessionIdGenerator: () => id, eventStore: mcpEventStore(app, { owner: `${user}\0${id}` }) })
 * ```
 */
export function mcpEventStore (app: FastifyInstance, options: McpEventStoreOptions): McpEventStore {
  const given = group('mcpEventStore', options, OPTIONS)
  if (given === undefined || typeof given.owner !== 'string' || given.owner === '') {
    throw new TowerSseOptionError('mcpEventStore.owner', given?.owner, 'a non-empty string (whose streams these are)')
  }
  const ttlMs = integer('mcpEventStore.ttlMs', given.ttlMs, DEFAULT_TTL_MS, { min: 1, max: MAX_TIMER_MS })
  if (given.follow !== undefined && typeof given.follow !== 'boolean') throw new TowerSseOptionError('mcpEventStore.follow', given.follow, 'a boolean')
  const follow = given.follow === true
  const onFollowEnd = optionalFunction<(streamId: string) => void>('mcpEventStore.onFollowEnd', given.onFollowEnd, 'a function (streamId) => void')
  const side = mcpLogOf(app)
  // Domain-separated from the plugin's own resumable streams: an MCP event id never checks on a
  // stream route, whatever the owner and the route's key have in common.
  const ownerKey = ownerHash(`mcp\0${given.owner}`)
  const stopped = new AbortController()

  const eventId = (seal: IdSeal, found: Pick<Found, 'id' | 'seal'>, seq: number): string => seal.eventId(found.id, seq, found.seal)

  /** Where `eventId` stands in this owner's logs, or null when it is none of theirs (or its log is gone). */
  const find = async (lastEventId: string): Promise<Found | null> => {
    const parsed = typeof lastEventId === 'string' ? parseResumableEventId(lastEventId) : null
    if (parsed === null || parsed.seq === 'end' || !parsed.streamId.startsWith('mcp-')) return null
    const seal = await side.sealer()
    if (!seal.holds(parsed, ownerKey)) return null
    const read = await side.log.read(parsed.streamId, parsed.seq, 0)
    if (read === null || read.meta.owner !== ownerKey || read.meta.label === undefined) return null
    return { id: parsed.streamId, streamId: read.meta.label, after: parsed.seq, seal: parsed.seal }
  }

  /**
   * The messages of `read`, each sent once in order (a follower's, up to a response); the cursor
   * after the last one sent (null: none), and whether the stream is over: a response sent, or the
   * log's end (a cancel) reached.
   */
  const sendEntries = async (seal: IdSeal, found: Found, read: LogRead, send: (eventId: string, message: McpMessage) => Promise<void>, untilResponse: boolean): Promise<{ cursor: number | null, over: boolean }> => {
    let cursor: number | null = null
    let over = false
    for (const entry of read.entries) {
      if (entry.kind === 'end') return { cursor, over: true }
      cursor = entry.seq
      const message = messageOf(entry.event.data)
      if (message === null) continue
      await send(eventId(seal, found, entry.seq), message)
      over ||= isResponse(message)
      if (over && untilResponse) break
    }
    return { cursor, over }
  }

  /** After the replay: what the log receives, until the stream is over, the log gone, or this store or the plugin stops. */
  const followAfter = async (seal: IdSeal, found: Found, after: number, send: (eventId: string, message: McpMessage) => Promise<void>): Promise<void> => {
    let cursor = after
    let wake: (() => void) | null = null
    const woken = (): void => { wake?.() }
    const unfollow = side.follow(found.id, woken)
    const stop = (): void => woken()
    stopped.signal.addEventListener('abort', stop)
    const done = (): boolean => stopped.signal.aborted || side.shared.closing.aborted
    try {
      while (!done()) {
        const changed = new Promise<void>((resolve) => { wake = resolve })
        const read = await side.log.read(found.id, cursor, PAGE)
        if (done() || read === null || cursor + 1 < read.first) return
        const sent = await sendEntries(seal, found, read, send, true)
        if (sent.over) return
        cursor = sent.cursor ?? cursor
        if (read.entries.length === 0) await changed
      }
    } catch (error) {
      app.log.warn({ err: error, streamId: found.streamId }, 'tower-sse/mcp: following a stream\'s log failed; the client resumes again')
    } finally {
      stopped.signal.removeEventListener('abort', stop)
      unfollow()
    }
  }

  const ended = (streamId: string): void => {
    try {
      onFollowEnd?.(streamId)
    } catch (error) {
      app.log.error({ err: error, streamId }, 'tower-sse/mcp: onFollowEnd threw')
    }
  }

  return {
    async storeEvent (streamId: string, message: McpMessage): Promise<string> {
      if (typeof streamId !== 'string' || streamId === '') throw new TypeError('tower-sse/mcp: storeEvent needs the SDK\'s stream id')
      const seal = await side.sealer()
      const id = logIdOf(ownerKey, streamId)
      const seq = await side.log.record(id, ownerKey, ttlMs, streamId, [{ data: JSON.stringify(message) }])
      if (seq === null) throw new Error('tower-sse/mcp: this stream\'s log takes no more events (cancelled)')
      return seal.eventId(id, seq, seal.seal(id, ownerKey))
    },

    async getStreamIdForEventId (lastEventId: string): Promise<string | undefined> {
      return (await find(lastEventId))?.streamId
    },

    async replayEventsAfter (lastEventId: string, { send }: { send: (eventId: string, message: McpMessage) => Promise<void> }): Promise<string> {
      const found = await find(lastEventId)
      if (found === null) throw new Error('tower-sse/mcp: no stream of this owner has this event id (another owner\'s, forged, or expired)')
      const seal = await side.sealer()
      let cursor = found.after
      let over = false
      for (;;) {
        const read = await side.log.read(found.id, cursor, PAGE)
        if (read === null) throw new Error('tower-sse/mcp: this stream\'s log expired during the replay')
        if (cursor + 1 < read.first) throw new Error('tower-sse/mcp: the events after this id were trimmed from the log')
        const sent = await sendEntries(seal, found, read, send, false)
        cursor = sent.cursor ?? cursor
        over ||= sent.over
        if (read.entries.length < PAGE) break
      }
      if (follow) {
        // After the SDK has answered with the replay (it registers the stream once this resolves):
        // a transport closed by onFollowEnd before then would answer 404 instead.
        const from = cursor
        setImmediate(() => {
          const following = over ? Promise.resolve() : followAfter(seal, found, from, send)
          void following.then(() => ended(found.streamId))
        })
      }
      return found.streamId
    },

    close (): void {
      stopped.abort()
    }
  }
}
