/**
 * tower-sse/client: a reconnecting Server-Sent Events client for Node ≥ 20 and browsers.
 *
 * A drop-in `EventSource` (same events, attributes, states and constants) that never joins a
 * reconnect storm: it honours `Retry-After` on 503/429 (EventSource gives up for good), backs off
 * exponentially with full jitter on errors, resets its failure count only after a connection stayed
 * healthy for a while, closes as done on the answer's end (`event: end`, or 204), and stops on the
 * server's own `event: error` or a 4xx. In a browser, the tabs that open the same same-origin URL
 * share one stream (tabs.ts).
 *
 * Plain ES modules with one runtime import (`eventsource-parser`): browsers load them without a
 * bundler (an import map resolves the parser); Node loads the CommonJS build.
 *   policy.ts   what a response means: a stream, a wait (Retry-After) or a stop
 *   ../shared/  the backoff and jitter, and a refused value in an error message (shared with the plugin)
 *   options.ts  defaults and validation
 *   events.ts   states, errors and events
 *   wire.ts     one stream: fetch + eventsource-parser + reconnects
 *   tabs.ts     leader election and relay across tabs
 *   index.ts    the EventSource-shaped client
 */
import {
  TowerSseClientError,
  TowerSseErrorEvent,
  TowerSseStateEvent,
  type TowerSseClientState,
  type TowerSseMessage,
  type WireMessage
} from './events.ts'
import { normalizeClientOptions, type NormalizedClientOptions, type TowerSseClientOptions } from './options.ts'
import { TabShare, type TabLocks, type TabRole, type TabSink } from './tabs.ts'
import { StreamWire, type WireSink } from './wire.ts'

export type { RandomSource } from '../shared/backoff.ts'
export {
  CLIENT_DEFAULTS, TowerSseClientOptionError, type TowerSseAttempt, type TowerSseBody, type TowerSseClientOptions, type TowerSseHeaders,
  type TowerSseOnResponse
} from './options.ts'
export { TowerSseClientError, TowerSseErrorEvent, TowerSseStateEvent, type TowerSseClientErrorCode, type TowerSseClientState, type TowerSseMessage, type WaitReason } from './events.ts'
export type { TabRole } from './tabs.ts'

export interface TowerSseClientEventMap {
  open: Event
  message: MessageEvent<string>
  /** The server's `event: resync`: too far behind to replay what was missed, so refetch state. */
  resync: MessageEvent<string>
  /**
   * The answer is complete, and the client closes right after (no reconnect, no error): the
   * server's `event: end` (a MessageEvent), or a 204 on a reconnect (a plain Event: no data).
   */
  end: MessageEvent<string> | Event
  /**
   * The client's own (a TowerSseErrorEvent: before every reconnect, and once when it stops for good),
   * or a server's `event: error` (a MessageEvent, as EventSource gives it): the plugin's own, whose
   * data is `{"code":"TOWER_SSE_…"}`, is then followed by the client's fatal one
   * (TOWER_SSE_CLIENT_SERVER_ERROR); any other is an application's named event.
   */
  error: TowerSseErrorEvent | MessageEvent<string>
  statechange: TowerSseStateEvent
  /** This tab started or stopped holding the shared stream (see `tabRole`). */
  rolechange: Event
}

type Listener<E> = ((event: E) => void) | { handleEvent: (event: E) => void }
type Handler<E> = ((this: TowerSseClient, event: E) => unknown) | null
/**
 * What reading a handler attribute gives: typed by plain `Event`, so that a TowerSseClient is
 * assignable to `EventSource` (whose handlers take `Event`); setting one is typed by the client's own events.
 */
type HandlerRead = ((event: Event) => unknown) | null

// Typed overloads for the known event types; named server events arrive as MessageEvent.
export interface TowerSseClient {
  addEventListener<K extends keyof TowerSseClientEventMap>(type: K, listener: Listener<TowerSseClientEventMap[K]> | null, options?: boolean | AddEventListenerOptions): void
  addEventListener(type: string, listener: Listener<MessageEvent<string>> | null, options?: boolean | AddEventListenerOptions): void
  removeEventListener<K extends keyof TowerSseClientEventMap>(type: K, listener: Listener<TowerSseClientEventMap[K]> | null, options?: boolean | EventListenerOptions): void
  removeEventListener(type: string, listener: Listener<MessageEvent<string>> | null, options?: boolean | EventListenerOptions): void
}

interface MessageSink {
  push: (message: TowerSseMessage) => void
  end: (error: TowerSseClientError | null, dropQueued: boolean) => void
}

/** As EventSource: the URL resolved against the page, `String(url)` first; failure is a SyntaxError DOMException. */
function resolveUrl (url: unknown): string {
  const text = String(url)
  try {
    return new URL(text, (globalThis as { location?: { href: string } }).location?.href).href
  } catch {
    throw new DOMException(`tower-sse/client: ${JSON.stringify(text)} is not a valid URL`, 'SyntaxError')
  }
}

/**
 * The channel and lock name shared by the tabs that may share this stream, or null when it is not
 * shared: outside a browser, opted out, or another origin (its credentials and CORS are the page's own business).
 */
function tabShareName (url: string, options: NormalizedClientOptions): string | null {
  const origin = (globalThis as { location?: { origin: string } }).location?.origin
  if (!options.shareAcrossTabs || origin === undefined || typeof BroadcastChannel !== 'function') return null
  if (new URL(url).origin !== origin) return null
  // Shared only when the name says all of the request: computed headers may differ per tab, and a
  // body cannot be compared by name.
  if (typeof options.headers === 'function' || options.method.toUpperCase() !== 'GET') return null
  const headers = Object.entries(options.headers).map(([name, value]) => [name.toLowerCase(), value]).sort()
  return `tower-sse/client ${JSON.stringify([url, headers, options.withCredentials])}`
}

/**
 * `new TowerSseClient(url, options)` connects at once and keeps reconnecting until `close()`, the
 * answer's end (`event: end`, or 204: an `end` event, then closed with no error) or a fatal answer
 * (the server's own `event: error`, 4xx other than 429, a non-SSE 200). Listen for `message`, named
 * events, `resync`, `end`, `open`, `error` and `statechange` (or use `onopen`, `onmessage`,
 * `onerror`), or iterate with `for await`.
 */
export class TowerSseClient extends EventTarget {
  static readonly CONNECTING = 0
  static readonly OPEN = 1
  static readonly CLOSED = 2
  declare readonly CONNECTING: 0
  declare readonly OPEN: 1
  declare readonly CLOSED: 2

  /** The stream's URL, resolved (as EventSource's `url`). */
  readonly url: string
  readonly withCredentials: boolean
  private currentState: TowerSseClientState = { kind: 'connecting', attempt: 1 }
  private lastId: string
  private role: TabRole = 'own'
  private readonly transport: StreamWire | TabShare
  private readonly sinks = new Set<MessageSink>()
  private readonly handlers = new Map<string, Handler<Event>>()
  /** close() was called: what the iterators hold is dropped (any other close lets them yield it first). */
  private closing = false

  constructor (url: string | URL, options?: TowerSseClientOptions) {
    super()
    this.url = resolveUrl(url)
    const normalized = normalizeClientOptions(options)
    this.withCredentials = normalized.withCredentials
    this.lastId = normalized.lastEventId
    const sink: TabSink = {
      state: (state) => this.applyState(state),
      open: () => this.dispatchEvent(new Event('open')),
      message: (message) => this.deliver(message),
      error: (error) => this.dispatchEvent(new TowerSseErrorEvent(error)),
      end: () => {
        if (this.currentState.kind !== 'closed') this.dispatchEvent(new Event('end'))
      },
      role: (role) => {
        this.role = role
        this.dispatchEvent(new Event('rolechange'))
      },
      lastEventId: () => this.lastId,
      setLastEventId: (id) => { this.lastId = id }
    }
    const openWire = (lastEventId: string, wireSink: WireSink): StreamWire => new StreamWire(this.url, normalized, lastEventId, wireSink)
    const shareName = tabShareName(this.url, normalized)
    const locks = (globalThis as { navigator?: { locks?: TabLocks } }).navigator?.locks
    this.transport = shareName === null ? openWire(this.lastId, sink) : new TabShare(shareName, openWire, sink, locks)
    // Next microtask, so that listeners added right after `new` see the first statechange.
    queueMicrotask(() => this.transport.start())
  }

  get state (): TowerSseClientState {
    return this.currentState
  }

  /** 0 connecting (or waiting to reconnect), 1 open, 2 closed: as EventSource. */
  get readyState (): number {
    switch (this.currentState.kind) {
      case 'open': return TowerSseClient.OPEN
      case 'closed': return TowerSseClient.CLOSED
      default: return TowerSseClient.CONNECTING
    }
  }

  /** The id of the last event seen; sent as `Last-Event-ID` on every reconnect. */
  get lastEventId (): string {
    return this.lastId
  }

  /** `own` (a stream of its own), `leader` (holds the stream the tabs share) or `follower` (gets it relayed). */
  get tabRole (): TabRole {
    return this.role
  }

  get onopen (): HandlerRead { return this.handler('open') }
  set onopen (handler: Handler<Event>) { this.setHandler('open', handler) }
  get onmessage (): HandlerRead { return this.handler('message') }
  set onmessage (handler: Handler<MessageEvent<string>>) { this.setHandler('message', handler as Handler<Event>) }
  get onerror (): HandlerRead { return this.handler('error') }
  set onerror (handler: Handler<TowerSseErrorEvent | MessageEvent<string>>) { this.setHandler('error', handler as Handler<Event>) }

  /** Stops for good: aborts the request in flight and cancels any pending retry (a leader tab hands the stream over). */
  close (): void {
    if (this.currentState.kind === 'closed') return
    this.closing = true
    this.transport.close()
    this.applyState({ kind: 'closed', error: null })
  }

  /**
   * Yields every server event (message, named, resync, end) from now until close() or the answer's
   * end; throws a fatal error after the events before it.
   */
  [Symbol.asyncIterator] (): AsyncIterator<TowerSseMessage> {
    const queue: TowerSseMessage[] = []
    let finished = this.currentState.kind === 'closed'
    let failure: TowerSseClientError | null = null
    let wake: (() => void) | null = null
    const sink: MessageSink = {
      push: (message) => {
        queue.push(message)
        wake?.()
      },
      end: (error, dropQueued) => {
        finished = true
        failure = error
        // close() means stop now, as with EventSource; before the answer's end or a fatal error,
        // what arrived is still yielded.
        if (dropQueued) queue.length = 0
        wake?.()
      }
    }
    if (!finished) this.sinks.add(sink)
    return {
      next: async () => {
        while (queue.length === 0 && !finished) await new Promise<void>((resolve) => { wake = resolve })
        wake = null
        const message = queue.shift()
        if (message !== undefined) return { value: message, done: false }
        if (failure !== null) throw failure
        return { value: undefined, done: true }
      },
      // `break` out of `for await` (or return()) closes the client, as it destroys a Node stream:
      // a loop that stopped reading no longer holds a connection that keeps the process alive.
      return: async () => {
        this.sinks.delete(sink)
        finished = true
        queue.length = 0
        this.close()
        return { value: undefined, done: true }
      }
    }
  }

  private handler (type: string): HandlerRead {
    return (this.handlers.get(type) ?? null) as HandlerRead
  }

  /** An event handler attribute: one listener, added the first time, calling whatever handler is set now. */
  private setHandler (type: string, handler: Handler<Event>): void {
    if (!this.handlers.has(type)) {
      this.addEventListener(type, (event: Event) => { this.handlers.get(type)?.call(this, event) })
    }
    this.handlers.set(type, typeof handler === 'function' ? handler : null)
  }

  private deliver (message: WireMessage): void {
    if (this.currentState.kind === 'closed') return
    this.lastId = message.lastEventId
    const { type, data, lastEventId, origin } = message
    for (const sink of this.sinks) sink.push({ type, data, lastEventId })
    this.dispatchEvent(new MessageEvent(type, { data, lastEventId, origin }))
  }

  private applyState (state: TowerSseClientState): void {
    if (this.currentState.kind === 'closed') return
    this.currentState = state
    if (state.kind === 'closed') {
      // A fatal error ends every tab's client; the share is then left too.
      this.transport.close()
    }
    this.dispatchEvent(new TowerSseStateEvent(state))
    if (state.kind !== 'closed') return
    for (const sink of this.sinks) sink.end(state.error, this.closing)
    this.sinks.clear()
  }
}

// As EventSource: the constants are on the prototype too (`es.OPEN`).
for (const [name, value] of [['CONNECTING', 0], ['OPEN', 1], ['CLOSED', 2]] as const) {
  Object.defineProperty(TowerSseClient.prototype, name, { value, enumerable: true })
}
