import { IpcClient } from '../ipc'
import { spawnSibling } from '../spawn-sibling'
import type { ClientKind, OpenReply, PhaseReply } from './seq-client'
import { addAccount, emptyPhaseAccount, type PhaseAccount, type SequenceAccount } from './accounting'
import type { PostLog } from './notify'

const REQUEST_MS = 120_000

/** The chaos and restart phases' clients: processes of `tower-sse/client` clients plus one of bare EventSources. */
export class Population {
  private constructor (private readonly processes: Array<{ kind: ClientKind, ipc: IpcClient, count: number }>) {}

  /** `launcher`: a command each client process runs under, e.g. ['taskset', '-c', '1']. */
  static spawn (clients: number, perProcess: number, eventSources: number, launcher?: string[]): Population {
    const parts: Array<{ kind: ClientKind, count: number }> = []
    for (let left = clients; left > 0; left -= perProcess) parts.push({ kind: 'client', count: Math.min(perProcess, left) })
    if (eventSources > 0) parts.push({ kind: 'eventsource', count: eventSources })
    return new Population(parts.map((part, i) => ({
      ...part,
      ipc: new IpcClient(spawnSibling(__filename, 'seq-client', { raiseFileLimit: true, launcher }), `${part.kind} process ${i}`)
    })))
  }

  /** Opens every client; resolves with how many of each kind are open. */
  async open (url: string, timeoutMs: number): Promise<Record<ClientKind, OpenReply & { count: number }>> {
    const replies = await Promise.all(this.processes.map(async (p) =>
      ({ kind: p.kind, count: p.count, reply: await p.ipc.request<OpenReply>({ type: 'open', kind: p.kind, url, count: p.count, timeoutMs }, timeoutMs + REQUEST_MS) })))
    const sum: Record<ClientKind, OpenReply & { count: number }> = {
      client: { count: 0, open: 0, closedForGood: 0 }, eventsource: { count: 0, open: 0, closedForGood: 0 }
    }
    for (const { kind, count, reply } of replies) {
      sum[kind].count += count
      sum[kind].open += reply.open
      sum[kind].closedForGood += reply.closedForGood
    }
    return sum
  }

  async mark (): Promise<void> {
    await Promise.all(this.processes.map((p) => p.ipc.request({ type: 'mark' }, REQUEST_MS)))
  }

  /**
   * Accounts every client for sequence numbers [from, to], per kind of client; `window`: the most
   * notifies the poster had in flight (see accountSequence), 1 for one at a time.
   */
  async phase (log: PostLog, from: number, to: number, window = 1): Promise<Record<ClientKind, KindPhase>> {
    const request = { type: 'phase', accepted: log.accepted, unknown: log.unknown, from, to, window }
    const replies = await Promise.all(this.processes.map(async (p) => ({ kind: p.kind, reply: await p.ipc.request<PhaseReply>(request, REQUEST_MS) })))
    const result: Record<ClientKind, KindPhase> = { client: emptyKindPhase(), eventsource: emptyKindPhase() }
    for (const { kind, reply } of replies) {
      const into = result[kind]
      addAccount(into.account, reply.account)
      for (const seq of reply.lostSeqs) into.lostSeqs.add(seq)
      into.goneAtMark += reply.goneAtMark
      for (const group of ['reconnected', 'stayed'] as const) {
        for (const [resyncs, clients] of reply.resyncs[group]) into.resyncs[group].set(resyncs, (into.resyncs[group].get(resyncs) ?? 0) + clients)
      }
      into.refusals += reply.refusals
      into.closedForGood += reply.closedForGood
      into.reopens.push(...reply.reopens)
    }
    return result
  }

  /** How many clients have received `seq`, and when the last of them did (epoch ms). */
  async arrival (seq: number): Promise<{ clients: number, lastMs: number }> {
    const replies = await Promise.all(this.processes.map((p) => p.ipc.request<{ clients: number, lastMs: number }>({ type: 'arrival', seq }, REQUEST_MS)))
    return { clients: replies.reduce((s, r) => s + r.clients, 0), lastMs: Math.max(0, ...replies.map((r) => r.lastMs)) }
  }

  /** The highest sequence number every client still in the run has reached (null: none is), and what the slowest is doing. */
  async slowest (): Promise<{ highest: number, state: string } | null> {
    const replies = await Promise.all(this.processes.map((p) => p.ipc.request<{ highest: number | null, state: string }>({ type: 'slowest' }, REQUEST_MS)))
    const reached = replies.filter((r): r is { highest: number, state: string } => r.highest !== null)
    return reached.length === 0 ? null : reached.reduce((a, b) => b.highest < a.highest ? b : a)
  }

  async exit (): Promise<void> {
    await Promise.all(this.processes.map(async (p) => {
      await p.ipc.request({ type: 'close' }, 5000).catch(() => undefined)
      await p.ipc.exit()
    }))
  }
}

export interface KindPhase {
  account: PhaseAccount
  lostSeqs: Set<number>
  goneAtMark: number
  /** resyncs in the phase → clients, for the clients that reconnected in it and for the others. */
  resyncs: { reconnected: Map<number, number>, stayed: Map<number, number> }
  refusals: number
  closedForGood: number
  reopens: number[]
}

function emptyKindPhase (): KindPhase {
  return { account: emptyPhaseAccount(), lostSeqs: new Set(), goneAtMark: 0, resyncs: { reconnected: new Map(), stayed: new Map() }, refusals: 0, closedForGood: 0, reopens: [] }
}

/** One kind of client's phase: the sums of its clients' accounts (see SequenceAccount) and more. */
export interface KindRow extends SequenceAccount {
  kind: ClientKind
  /** Clients accounted (open, or reconnecting, when the phase began). */
  clients: number
  /** Clients already closed for good when the phase began (left out). */
  goneAtStart: number
  clientsWithLoss: number
  clientsWithDuplicates: number
  clientsOutOfOrder: number
  /** [resyncs in the phase, clients], e.g. [[0, 1990], [1, 10]]: all clients, those that reconnected in the phase, the others. */
  resyncs: Array<[number, number]>
  resyncsReconnected: Array<[number, number]>
  resyncsStayed: Array<[number, number]>
  refusals: number
  closedForGood: number
}

const pairs = (counts: Map<number, number>): Array<[number, number]> => [...counts].sort((a, b) => a[0] - b[0])

function sumCounts (a: Map<number, number>, b: Map<number, number>): Map<number, number> {
  const sum = new Map(a)
  for (const [key, count] of b) sum.set(key, (sum.get(key) ?? 0) + count)
  return sum
}

export function kindRows (phase: Record<ClientKind, KindPhase>): KindRow[] {
  return (['client', 'eventsource'] as const).filter((kind) => phase[kind].account.clients + phase[kind].goneAtMark > 0).map((kind) => {
    const { account, goneAtMark, resyncs, refusals, closedForGood } = phase[kind]
    return {
      kind,
      clients: account.clients,
      goneAtStart: goneAtMark,
      ...account.totals,
      clientsWithLoss: account.clientsWith.lost,
      clientsWithDuplicates: account.clientsWith.duplicated,
      clientsOutOfOrder: account.clientsWith.outOfOrder,
      resyncs: pairs(sumCounts(resyncs.reconnected, resyncs.stayed)),
      resyncsReconnected: pairs(resyncs.reconnected),
      resyncsStayed: pairs(resyncs.stayed),
      refusals,
      closedForGood
    }
  })
}
