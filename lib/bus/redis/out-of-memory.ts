/** Redis's refusal of a write at `maxmemory` when it may evict nothing (noeviction, or volatile-* with no key to evict). */
export function isOutOfMemory (error: Error): boolean {
  const previous = (error as Error & { previousErrors?: Error[] }).previousErrors ?? []
  return [error, ...previous].some((e) => e.name === 'ReplyError' && /\bOOM command not allowed\b/.test(e.message))
}

/**
 * An out-of-memory spell: from the first write Redis refuses with OOM (a publish or the receive
 * probe) to the first write it takes again. The bus's state says 'oom' meanwhile; the spell is
 * logged once when it starts and once when it ends, never per refused publish.
 */
export class OutOfMemory {
  /** Publishes Redis refused with an error reply (OOM or another), since start. */
  refusedPublishes = 0
  private since: number | null = null
  private refusedInSpell = 0

  constructor (
    private readonly monotonic: () => number,
    private readonly log: { warn: (msg: string) => void, info: (msg: string) => void },
    /** Called when the spell starts or ends. */
    private readonly changed: () => void
  ) {}

  get active (): boolean {
    return this.since !== null
  }

  /** A publish Redis answered with an error. */
  publishRefused (error: Error): void {
    this.refusedPublishes++
    if (this.writeRefused(error)) this.refusedInSpell++
  }

  /** A write (publish or probe) Redis refused; whether it was for memory. */
  writeRefused (error: Error): boolean {
    if (!isOutOfMemory(error)) return false
    if (this.since !== null) return true
    this.since = this.monotonic()
    this.refusedInSpell = 0
    this.log.warn(`tower-sse: Redis is out of memory (${error.message.split('.')[0]}): every broadcast is refused until memory is freed; ` +
      'streams stay open (docs/bus-operations.md)')
    this.changed()
    return true
  }

  /** Redis took a write: the spell, if any, is over. */
  wrote (): void {
    if (this.since === null) return
    const lasted = Math.round(this.monotonic() - this.since)
    this.since = null
    this.log.info(`tower-sse: Redis takes writes again after ${lasted} ms out of memory (${this.refusedInSpell} publishes refused meanwhile)`)
    this.changed()
  }
}
