/** Put in a client's arrivals where it received `event: resync` (sequence numbers are >= 1). */
export const RESYNC = 0

/**
 * Put in a client's arrivals instead of RESYNC when the resync's `lastEventId` is known to be the
 * id of event `seq`: the instance had delivered everything up to it, so the resync covers it all,
 * even when no event follows the resync in the phase (a client back after the last broadcast).
 */
export function resyncThrough (seq: number): number {
  return -seq
}

/** One client's events of a phase, checked against what the server accepted. */
export interface SequenceAccount {
  /** Distinct sequence numbers of the phase received. */
  received: number
  /** Accepted (notify answered 200) but never received, and not covered by a resync. */
  lost: number
  /**
   * Accepted, never received, but no newer than the event a resync's id names (or, when the id is
   * not known, older than the first event after it): the resync told the client to refetch its
   * state, which holds them.
   */
  coveredByResync: number
  /** Received again after a first time. */
  duplicated: number
  /**
   * Received after a sequence number at least `window` higher (first receipts only): with one
   * notify in flight (window 1), after any higher number.
   */
  outOfOrder: number
  /** Received although notify refused it (e.g. a 503): it was published after all. */
  unexpected: number
}

/**
 * Accounts for the sequence numbers a client received, in arrival order, against the set the
 * poster saw accepted. Numbers whose POST had no answer (the worker died mid-request) may or may
 * not have been published: receiving one is fine, missing one is not a loss.
 *
 * Order: a poster with `window` notifies in flight at most sends number k only once every number
 * up to k − window has been answered, so those were published before k and every client must get
 * them first; numbers closer than that were in flight together, and the server may publish them in
 * either order. With one notify at a time (window 1, the default) publication order is sequence
 * order and any number received after a higher one is out of order.
 */
export function accountSequence (
  arrivals: readonly number[],
  accepted: ReadonlySet<number>,
  unknown: ReadonlySet<number>,
  range: { from: number, to: number },
  onLost?: (seq: number) => void,
  window = 1
): SequenceAccount {
  const seen = new Set<number>()
  let highest = Number.NEGATIVE_INFINITY
  let duplicated = 0
  let outOfOrder = 0
  let unexpected = 0
  let resyncPending = false
  let coveredBelow = Number.NEGATIVE_INFINITY
  for (const seq of arrivals) {
    if (seq === RESYNC) {
      resyncPending = true
      continue
    }
    if (seq < RESYNC) {
      // Exact: what came after the event it names was sent live, so a gap there is a loss.
      coveredBelow = Math.max(coveredBelow, 1 - seq)
      continue
    }
    if (resyncPending) {
      resyncPending = false
      coveredBelow = Math.max(coveredBelow, seq)
    }
    if (seq < range.from || seq > range.to) continue
    if (seen.has(seq)) {
      duplicated++
      continue
    }
    seen.add(seq)
    if (seq <= highest - window) outOfOrder++
    if (seq > highest) highest = seq
    if (!accepted.has(seq) && !unknown.has(seq)) unexpected++
  }
  let lost = 0
  let coveredByResync = 0
  for (const seq of accepted) {
    if (seq < range.from || seq > range.to || seen.has(seq)) continue
    if (seq < coveredBelow) {
      coveredByResync++
      continue
    }
    lost++
    onLost?.(seq)
  }
  return { received: seen.size, lost, coveredByResync, duplicated, outOfOrder, unexpected }
}

/** Sums over clients, and how many clients had at least one of each. */
export interface PhaseAccount {
  clients: number
  totals: Omit<SequenceAccount, 'received'> & { received: number }
  clientsWith: Record<typeof KINDS[number], number>
}

const KINDS = ['lost', 'coveredByResync', 'duplicated', 'outOfOrder', 'unexpected'] as const

export function emptyPhaseAccount (): PhaseAccount {
  return {
    clients: 0,
    totals: { received: 0, lost: 0, coveredByResync: 0, duplicated: 0, outOfOrder: 0, unexpected: 0 },
    clientsWith: { lost: 0, coveredByResync: 0, duplicated: 0, outOfOrder: 0, unexpected: 0 }
  }
}

/** Adds one client's account (or another process's sum, when `other` is a PhaseAccount). */
export function addAccount (sum: PhaseAccount, other: SequenceAccount | PhaseAccount): PhaseAccount {
  if ('totals' in other) {
    sum.clients += other.clients
    sum.totals.received += other.totals.received
    for (const kind of KINDS) {
      sum.totals[kind] += other.totals[kind]
      sum.clientsWith[kind] += other.clientsWith[kind]
    }
    return sum
  }
  sum.clients++
  sum.totals.received += other.received
  for (const kind of KINDS) {
    sum.totals[kind] += other[kind]
    if (other[kind] > 0) sum.clientsWith[kind]++
  }
  return sum
}
