import { recordPost, type NotifyOutcome, type PostLog } from '../lib/clients/notify'

/** The soak's notifies: a steady rate, a burst every so often, each POST's timeout, and how many may be in flight. */
export interface NotifyPlan {
  perSec: number
  burstEveryMs: number
  burstSize: number
  timeoutMs: number
  /** Notifies in flight at most (see SendWindow). */
  inFlight: number
}

/** Notifies due `elapsedMs` into the run: the steady rate's (the first at 0) and every burst's so far. */
export function postsDue (elapsedMs: number, notify: Pick<NotifyPlan, 'perSec' | 'burstEveryMs' | 'burstSize'>): number {
  if (elapsedMs < 0) return 0
  return Math.floor(elapsedMs * notify.perSec / 1000) + 1 + Math.floor(elapsedMs / notify.burstEveryMs) * notify.burstSize
}

/**
 * Sequence numbers in flight, retired in order: number k may be sent only once every number up to
 * k − size has been answered (a timeout is an answer). So at most `size` are out at once, and any
 * two numbers `size` or more apart were published in sequence order — what the clients' accounting
 * checks (accountSequence's window).
 */
export class SendWindow {
  private readonly answered = new Set<number>()
  /** The lowest number not answered yet. */
  private floor: number

  constructor (first: number, readonly size: number) {
    this.floor = first
  }

  canSend (seq: number): boolean {
    return seq < this.floor + this.size
  }

  answer (seq: number): void {
    this.answered.add(seq)
    while (this.answered.delete(this.floor)) this.floor++
  }
}

/** How the poster kept up: the most in flight, and how far behind its schedule it fell (notifies due, not yet sent). */
export interface PosterStats {
  /** Sequence numbers sent: firstSeq up to nextSeq − 1. */
  nextSeq: number
  inFlightLimit: number
  maxInFlight: number
  /** Notifies due but not sent, at most at any moment and at the end of the run (never sent). */
  maxBehind: number
  behindAtEnd: number
}

/**
 * The soak's poster: notifies sequence numbers `firstSeq`, `firstSeq + 1`, … on the plan's
 * schedule (postsDue) for `durationMs`, as many in flight as the SendWindow allows. A notify
 * that is due while the window is full waits (the poster catches up when answers come) rather
 * than being skipped: the run is to carry its count of publishes. Every answer is filed by
 * recordPost as before; each POST has its own timeout (`post` resolves within it). Bounded: nothing
 * is sent after `durationMs`, and it resolves once every POST out then is answered.
 */
export function postWindowed (
  post: (seq: number) => Promise<NotifyOutcome>,
  notify: NotifyPlan,
  durationMs: number,
  firstSeq: number,
  log: PostLog,
  now: () => number = Date.now
): Promise<PosterStats> {
  const start = now()
  const window = new SendWindow(firstSeq, notify.inFlight)
  const tickMs = Math.max(1, Math.floor(1000 / notify.perSec))
  let seq = firstSeq
  let inFlight = 0
  let maxInFlight = 0
  let maxBehind = 0
  let behindAtEnd = 0
  let ended = false
  let timer: NodeJS.Timeout | undefined
  return new Promise((resolve) => {
    const finish = (): void => resolve({ nextSeq: seq, inFlightLimit: notify.inFlight, maxInFlight, maxBehind, behindAtEnd })
    const pump = (): void => {
      clearTimeout(timer)
      timer = undefined
      if (ended) return
      const elapsed = now() - start
      if (elapsed >= durationMs) {
        ended = true
        behindAtEnd = Math.max(0, postsDue(durationMs - 1, notify) - (seq - firstSeq))
        if (inFlight === 0) finish()
        return
      }
      const due = postsDue(elapsed, notify)
      while (seq - firstSeq < due && window.canSend(seq)) send(seq++)
      maxBehind = Math.max(maxBehind, due - (seq - firstSeq))
      // The next tick of the schedule; an answer that frees the window pumps sooner.
      timer = setTimeout(pump, tickMs)
    }
    const send = (mine: number): void => {
      inFlight++
      if (inFlight > maxInFlight) maxInFlight = inFlight
      // postNotify never rejects (no answer is an outcome); a post that did would count as unanswered.
      post(mine).catch((error: unknown): NotifyOutcome => ({ kind: 'no-answer', error: String(error) })).then((outcome) => {
        recordPost(log, mine, outcome)
        window.answer(mine)
        inFlight--
        if (!ended) pump()
        else if (inFlight === 0) finish()
      })
    }
    pump()
  })
}
