import type { FastifyReply } from 'fastify'

interface Held {
  timer: NodeJS.Timeout
  release: () => void
}

/**
 * Slow rejection: during a storm a refusal is held for a while before it is answered, so a
 * client that ignores Retry-After can only retry as fast as the hold allows. At most `capacity`
 * refusals are held (each costs one timer and one socket); beyond that they are answered at once.
 */
export class Tarpit {
  private readonly held = new Set<Held>()

  constructor (private readonly capacity: number) {}

  /** Refusals held now. */
  get size (): number {
    return this.held.size
  }

  /** Holds `reply` for `delayMs`, then calls `answer`; false (nothing held) when full. */
  hold (reply: FastifyReply, delayMs: number, answer: () => void): boolean {
    if (this.held.size >= this.capacity) return false
    const onClose = (): void => {
      clearTimeout(entry.timer)
      this.held.delete(entry)
    }
    const entry: Held = {
      timer: setTimeout(() => entry.release(), delayMs),
      release: () => {
        clearTimeout(entry.timer)
        this.held.delete(entry)
        reply.raw.off('close', onClose)
        answer()
      }
    }
    entry.timer.unref()
    // A client that gives up while held costs nothing more.
    reply.raw.once('close', onClose)
    this.held.add(entry)
    return true
  }

  /** Answers every held refusal now (shutdown). */
  releaseAll (): void {
    for (const entry of [...this.held]) entry.release()
  }
}
