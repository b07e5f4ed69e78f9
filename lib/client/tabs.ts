/**
 * One stream for every tab of a browser. The tabs of an origin that open the same URL with the same
 * headers elect a leader (Web Locks; without them, BroadcastChannel heartbeats where the lowest tab
 * id wins and a silent leader's lease expires) which holds the only stream and relays every state,
 * open, message, error and end to the others: the answer's end or a fatal error closes every tab.
 * When the leader goes (close(), tab closed, renderer crashed) another tab takes over and resumes
 * with Last-Event-ID; each tab drops an event whose id it already delivered, so a hand-over neither
 * loses nor repeats one.
 */
import { errorRecord, reviveError, type ErrorRecord, type TowerSseClientState, type WireMessage } from './events.ts'
import type { StreamWire, WireSink } from './wire.ts'

/** `own`: this client holds its own stream (not shared); `leader` holds it for the tabs; `follower` gets it relayed. */
export type TabRole = 'own' | 'leader' | 'follower'

type StateRecord = Exclude<TowerSseClientState, { kind: 'closed' }> | { kind: 'closed', error: ErrorRecord | null }

/** What crosses the BroadcastChannel: relays from the leader, and the election's own messages. */
type TabMessage =
  | { t: 'state', state: StateRecord, lastEventId: string }
  | { t: 'open' }
  | { t: 'message', message: WireMessage }
  | { t: 'error', error: ErrorRecord }
  /** The leader's request was answered 204: the answer is complete (its closed state follows). */
  | { t: 'end' }
  | { t: 'hello' }
  | { t: 'beat' | 'claim' | 'resign', tab: number }

/** What a tab's client gets from the share: the wire's reports, its role, and its last event id both ways. */
export interface TabSink extends WireSink {
  role: (role: TabRole) => void
  lastEventId: () => string
  setLastEventId: (id: string) => void
}

/** The Web Locks API, as much of it as the election uses. */
export interface TabLocks {
  request: (name: string, options: { signal: AbortSignal }, callback: () => Promise<void>) => Promise<unknown>
}

/** Without Web Locks: a leader beats every beatMs; a follower that hears none for leaseMs claims, and leads after claimMs unchallenged. */
export const TAB_LEASE = Object.freeze({ beatMs: 250, leaseMs: 1500, claimMs: 250 })

/** Ids of the last events a tab delivered, to drop the ones a new leader's replay repeats. */
const SEEN_IDS = 1024

/** The election's time: the browser's by default; a test passes its own to step it beat by beat. */
export interface TabClock {
  now: () => number
  every: (tick: () => void, ms: number) => () => void
}

const SYSTEM_CLOCK: TabClock = {
  now: () => Date.now(),
  every: (tick, ms) => {
    const timer = setInterval(tick, ms)
    return () => clearInterval(timer)
  }
}

function stateRecord (state: TowerSseClientState): StateRecord {
  return state.kind === 'closed' ? { kind: 'closed', error: state.error === null ? null : errorRecord(state.error) } : state
}

function reviveState (state: StateRecord): TowerSseClientState {
  return state.kind === 'closed' ? { kind: 'closed', error: state.error === null ? null : reviveError(state.error) } : state
}

export class TabShare {
  private readonly channel: BroadcastChannel
  /** Lowest id wins an election without Web Locks. */
  private readonly tab = Math.random()
  private wire: StreamWire | null = null
  private closed = false
  private readonly lockRequest = new AbortController()
  private releaseLock: (() => void) | null = null
  private readonly seen = new Set<string>()
  private stopBeats: (() => void) | undefined
  private lastBeatAt = 0
  private claimingSince: number | null = null

  constructor (
    private readonly name: string,
    private readonly openWire: (lastEventId: string, sink: WireSink) => StreamWire,
    private readonly sink: TabSink,
    private readonly locks: TabLocks | undefined,
    private readonly clock: TabClock = SYSTEM_CLOCK
  ) {
    this.channel = new BroadcastChannel(name)
  }

  start (): void {
    if (this.closed) return
    this.channel.onmessage = (event: MessageEvent<TabMessage>) => this.receive(event.data)
    // A tab that goes away says so, so the next one takes over now rather than after the lease.
    globalThis.addEventListener?.('pagehide', this.leave)
    this.sink.role('follower')
    // A leader answers with the state it is in, so a new tab shows it at once.
    this.post({ t: 'hello' })
    if (this.locks !== undefined) {
      // Held until this tab leaves; the browser releases it when the tab closes or its renderer dies.
      this.locks.request(this.name, { signal: this.lockRequest.signal }, () => new Promise<void>((resolve) => {
        this.releaseLock = resolve
        if (this.closed) resolve()
        else this.lead()
      })).catch(() => {})
      return
    }
    // A leader answers hello with a beat; if none does within claimMs, this tab claims.
    this.lastBeatAt = this.clock.now() - TAB_LEASE.leaseMs + TAB_LEASE.claimMs
    this.stopBeats = this.clock.every(() => this.tick(), TAB_LEASE.beatMs)
  }

  /** This tab leaves: a leader resigns (the next tab takes over at once), a follower stops listening. */
  close (): void {
    if (this.closed) return
    globalThis.removeEventListener?.('pagehide', this.leave)
    const wire = this.wire
    this.wire = null
    wire?.close()
    if (wire !== null) this.post({ t: 'resign', tab: this.tab })
    this.closed = true
    this.stopBeats?.()
    this.lockRequest.abort()
    this.releaseLock?.()
    this.channel.close()
  }

  private readonly leave = (): void => this.close()

  private post (message: TabMessage): void {
    if (!this.closed) this.channel.postMessage(message)
  }

  private lead (): void {
    this.claimingSince = null
    this.sink.role('leader')
    const relay: WireSink = {
      state: (state) => {
        if (this.wire !== wire) return
        this.sink.setLastEventId(wire.lastEventId)
        this.post({ t: 'state', state: stateRecord(state), lastEventId: wire.lastEventId })
        this.sink.state(state)
        // The tab leaves the share on a fatal close, so its error is reported here, with the state.
        if (state.kind === 'closed' && state.error !== null) this.sink.error(state.error)
      },
      open: () => {
        if (this.wire !== wire) return
        this.post({ t: 'open' })
        this.sink.open()
      },
      message: (message) => {
        if (this.wire !== wire) return
        this.post({ t: 'message', message })
        this.deliver(message)
      },
      error: (error) => {
        // A fatal error travels inside the closed state (every tab leaves the share on it).
        if (this.wire !== wire || error.fatal) return
        this.post({ t: 'error', error: errorRecord(error) })
        this.sink.error(error)
      },
      end: () => {
        if (this.wire !== wire) return
        this.post({ t: 'end' })
        this.sink.end()
      }
    }
    const wire = this.openWire(this.sink.lastEventId(), relay)
    this.wire = wire
    if (this.locks === undefined) this.post({ t: 'beat', tab: this.tab })
    wire.start()
  }

  /** Without Web Locks, two tabs may lead for a moment: the higher id gives its stream up. */
  private stepDown (): void {
    const wire = this.wire
    this.wire = null
    wire?.close()
    this.lastBeatAt = this.clock.now()
    this.sink.role('follower')
  }

  private tick (): void {
    const now = this.clock.now()
    if (this.wire !== null) {
      this.post({ t: 'beat', tab: this.tab })
    } else if (this.claimingSince === null) {
      if (now - this.lastBeatAt >= TAB_LEASE.leaseMs) {
        this.claimingSince = now
        this.post({ t: 'claim', tab: this.tab })
      }
    } else if (now - this.claimingSince >= TAB_LEASE.claimMs) {
      this.lead()
    }
  }

  private deliver (message: WireMessage): void {
    if (message.id !== undefined && message.id !== '') {
      if (this.seen.has(message.id)) return
      this.seen.add(message.id)
      if (this.seen.size > SEEN_IDS) this.seen.delete(this.seen.values().next().value as string)
    }
    this.sink.message(message)
  }

  private receive (message: TabMessage): void {
    switch (message.t) {
      case 'hello':
        if (this.wire === null) return
        this.post({ t: 'state', state: stateRecord(this.wire.state), lastEventId: this.wire.lastEventId })
        if (this.locks === undefined) this.post({ t: 'beat', tab: this.tab })
        return
      case 'beat':
      case 'claim':
        this.heard(message.t, message.tab)
        return
      case 'resign':
        // The leader left on purpose: claim at the next tick rather than wait out its lease.
        this.lastBeatAt = 0
        return
    }
    // Relays matter to followers only (a leader about to step down keeps its own stream's view).
    if (this.wire !== null) return
    switch (message.t) {
      case 'state': {
        this.sink.setLastEventId(message.lastEventId)
        const state = reviveState(message.state)
        this.sink.state(state)
        if (state.kind === 'closed' && state.error !== null) this.sink.error(state.error)
        return
      }
      case 'open':
        this.sink.open()
        return
      case 'message':
        this.deliver(message.message)
        return
      case 'error':
        this.sink.error(reviveError(message.error))
        return
      case 'end':
        this.sink.end()
    }
  }

  /** Election without Web Locks: a beat or claim from a lower id wins; a leader answers higher ones with its beat. */
  private heard (kind: 'beat' | 'claim', tab: number): void {
    if (this.locks !== undefined) return
    if (this.wire !== null) {
      if (kind === 'beat' && tab < this.tab) this.stepDown()
      else this.post({ t: 'beat', tab: this.tab })
      return
    }
    if (kind === 'beat' || (this.claimingSince !== null && tab < this.tab)) {
      this.lastBeatAt = this.clock.now()
      this.claimingSince = null
    }
  }
}
