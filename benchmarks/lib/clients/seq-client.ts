/**
 * A client process of the chaos and Redis-restart phases: holds many `tower-sse/client` clients
 * (or bare `eventsource` ones) and records, per client, the sequence numbers it received in
 * arrival order, its resyncs, refusals and reconnects. The parent accounts for them per phase.
 */
import { EventSource } from 'eventsource'
import { TowerSseClient } from '../../../lib/client'
import { serveIpc, type IpcRequest } from '../ipc'
import { accountSequence, addAccount, emptyPhaseAccount, RESYNC, resyncThrough, type PhaseAccount } from './accounting'

export type ClientKind = 'client' | 'eventsource'

interface Held {
  arrivals: number[]
  /** The highest sequence number received: anything above it is a first receipt, no search needed. */
  highest: number
  /**
   * One bit per sequence number received (grown as they come): whether a number at or below
   * `highest` is a first receipt, without a search through a million arrivals (a poster with
   * several notifies in flight has them arrive out of sequence order every so often).
   */
  seen: Uint8Array
  resyncs: number
  /** Where in `arrivals` each resync is, and the newest id it names (its data's lastEventId). */
  resyncIds: Array<{ at: number, id: string }>
  /** Refused attempts (503/429): tower-sse/client waits and retries; EventSource gives up. */
  refusals: number
  refusalsAtMark: number
  /** Epoch ms of every open after the first (a reconnect). */
  reopens: number[]
  opened: boolean
  closedForGood: boolean
  /** Resyncs and refusals when the phase began (both are reported per phase). */
  resyncsAtMark: number
  /** Closed for good before the phase began: left out of the phase's accounting, counted apart. */
  goneAtMark: boolean
  /** What the client is doing now (its state, as its API tells it), and when it last received an event. */
  describe: () => string
  lastArrivalMs: number
}

function newHeld (): Held {
  return { arrivals: [], highest: -1, seen: new Uint8Array(1024), resyncs: 0, resyncIds: [], refusals: 0, refusalsAtMark: 0, reopens: [], opened: false, closedForGood: false, resyncsAtMark: 0, goneAtMark: false, describe: () => '', lastArrivalMs: 0 }
}

let kind: ClientKind = 'client'
const held: Held[] = []
const closers: Array<() => void> = []
/** Per sequence number: how many clients received it (first receipt) and the latest arrival. */
const firstArrivals = new Map<number, { clients: number, lastMs: number }>()
/** The sequence number each event id carried, as any client of this process received it. */
const seqOfId = new Map<string, number>()

function field (request: IpcRequest, name: string): unknown {
  if (request[name] === undefined) throw new Error(`"${request.type}" needs ${name}`)
  return request[name]
}

function onData (client: Held, data: string, id: string): void {
  const { title } = JSON.parse(data) as { title?: unknown }
  if (typeof title !== 'string') return
  const seq = Number(title)
  if (!Number.isSafeInteger(seq) || seq < 1) return
  if (id !== '') seqOfId.set(id, seq)
  if (!hasSeen(client, seq)) {
    markSeen(client, seq)
    const seen = firstArrivals.get(seq) ?? { clients: 0, lastMs: 0 }
    seen.clients++
    seen.lastMs = Date.now()
    firstArrivals.set(seq, seen)
  }
  client.arrivals.push(seq)
  client.lastArrivalMs = Date.now()
  if (seq > client.highest) client.highest = seq
}

function hasSeen (client: Held, seq: number): boolean {
  const byte = seq >> 3
  return byte < client.seen.length && (client.seen[byte] & (1 << (seq & 7))) !== 0
}

function markSeen (client: Held, seq: number): void {
  const byte = seq >> 3
  if (byte >= client.seen.length) {
    const grown = new Uint8Array(Math.max(byte + 1, client.seen.length * 2))
    grown.set(client.seen)
    client.seen = grown
  }
  client.seen[byte] |= 1 << (seq & 7)
}

function onResync (client: Held, data: string): void {
  client.resyncs++
  const { lastEventId } = JSON.parse(data) as { lastEventId?: unknown }
  if (typeof lastEventId === 'string') client.resyncIds.push({ at: client.arrivals.length, id: lastEventId })
  client.arrivals.push(RESYNC)
}

/**
 * The client's arrivals with each resync whose id names an event some client of this process
 * received marked as covering up to it (resolved now: that event may have reached the others
 * only after the resync reached this one).
 */
function arrivalsOf (client: Held): number[] {
  const arrivals = client.arrivals.slice()
  for (const { at, id } of client.resyncIds) {
    const seq = seqOfId.get(id)
    if (seq !== undefined) arrivals[at] = resyncThrough(seq)
  }
  return arrivals
}

function onOpen (client: Held): void {
  if (client.opened) client.reopens.push(Date.now())
  client.opened = true
}

function holdTowerClient (url: string): void {
  const client = newHeld()
  const source = new TowerSseClient(url, { shareAcrossTabs: false })
  client.describe = () => JSON.stringify(source.state)
  source.addEventListener('message', (event) => onData(client, event.data, event.lastEventId))
  source.addEventListener('resync', (event) => onResync(client, event.data))
  source.addEventListener('open', () => onOpen(client))
  source.addEventListener('statechange', () => {
    const state = source.state
    if (state.kind === 'waiting' && state.reason === 'refused') client.refusals++
    if (state.kind === 'closed') client.closedForGood = true
  })
  held.push(client)
  closers.push(() => source.close())
}

function holdEventSource (url: string): void {
  const client = newHeld()
  const source = new EventSource(url)
  client.describe = () => `EventSource readyState ${source.readyState}`
  source.addEventListener('message', (event) => onData(client, event.data, event.lastEventId))
  source.addEventListener('resync', (event) => onResync(client, event.data))
  source.addEventListener('open', () => onOpen(client))
  source.addEventListener('error', () => {
    // A non-200 answer (a refusal) fails the connection for good: the spec's EventSource never retries it.
    if (source.readyState === EventSource.CLOSED) {
      client.refusals++
      client.closedForGood = true
    }
  })
  held.push(client)
  closers.push(() => source.close())
}

export interface OpenReply { open: number, closedForGood: number }
export interface PhaseReply {
  account: PhaseAccount
  /** Accepted sequence numbers that at least one client of this process never received. */
  lostSeqs: number[]
  /** Clients already closed for good when the phase began (not in `account`). */
  goneAtMark: number
  /** Resyncs in the phase as [resyncs, clients] pairs, of the clients that reconnected in it and of the others. */
  resyncs: { reconnected: Array<[number, number]>, stayed: Array<[number, number]> }
  refusals: number
  closedForGood: number
  reopens: number[]
}

serveIpc('cluster seq client', {
  /** Starts `count` clients of `kind` on `url` and waits (at most `timeoutMs`) until every one is open. */
  open: async (request): Promise<OpenReply> => {
    kind = String(field(request, 'kind')) as ClientKind
    const url = String(field(request, 'url'))
    const count = Number(field(request, 'count'))
    const deadline = Date.now() + Number(field(request, 'timeoutMs'))
    for (let i = 0; i < count; i++) {
      if (kind === 'eventsource') holdEventSource(url)
      else holdTowerClient(url)
    }
    const done = (): boolean => held.every((c) => c.opened || c.closedForGood)
    while (!done() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
    return { open: held.filter((c) => c.opened).length, closedForGood: held.filter((c) => c.closedForGood).length }
  },

  /** A phase begins: resyncs and reconnects are counted from here. */
  mark: () => {
    for (const client of held) {
      client.resyncsAtMark = client.resyncs
      client.refusalsAtMark = client.refusals
      client.reopens = []
      client.goneAtMark = client.closedForGood
    }
  },

  /**
   * Accounts every client for the phase's sequence numbers [from, to]; `window` (default 1): the
   * notifies the poster had in flight at most, so only numbers that far apart must arrive in order.
   */
  phase: (request): PhaseReply => {
    const accepted = new Set(field(request, 'accepted') as number[])
    const unknown = new Set(field(request, 'unknown') as number[])
    const range = { from: Number(field(request, 'from')), to: Number(field(request, 'to')) }
    const window = request.window === undefined ? 1 : Number(request.window)
    const account = emptyPhaseAccount()
    const resyncs = { reconnected: new Map<number, number>(), stayed: new Map<number, number>() }
    const lostSeqs = new Set<number>()
    for (const client of held) {
      if (client.goneAtMark) continue
      addAccount(account, accountSequence(arrivalsOf(client), accepted, unknown, range, (seq) => lostSeqs.add(seq), window))
      const n = client.resyncs - client.resyncsAtMark
      const group = client.reopens.length > 0 ? resyncs.reconnected : resyncs.stayed
      group.set(n, (group.get(n) ?? 0) + 1)
    }
    return {
      account,
      lostSeqs: [...lostSeqs].sort((a, b) => a - b),
      goneAtMark: held.filter((c) => c.goneAtMark).length,
      resyncs: { reconnected: [...resyncs.reconnected], stayed: [...resyncs.stayed] },
      refusals: held.reduce((sum, c) => sum + c.refusals - c.refusalsAtMark, 0),
      closedForGood: held.filter((c) => c.closedForGood).length,
      reopens: held.flatMap((c) => c.reopens)
    }
  },

  /** How many clients have received `seq`, and when the last of them did (epoch ms). */
  arrival: (request) => firstArrivals.get(Number(field(request, 'seq'))) ?? { clients: 0, lastMs: 0 },

  /** The lowest `highest` of the clients still in the run (closed for good ones left out), or null if none is; and what that client is doing. */
  slowest: () => {
    const live = held.filter((c) => !c.closedForGood)
    if (live.length === 0) return { highest: null, state: '' }
    const client = live.reduce((a, b) => b.highest < a.highest ? b : a)
    return { highest: client.highest, state: `${client.describe()}, last event ${((Date.now() - client.lastArrivalMs) / 1000).toFixed(1)} s ago` }
  },

  close: () => {
    for (const close of closers) close()
    return held.length
  }
})
