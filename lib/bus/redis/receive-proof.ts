import type { RedisConnection } from './connection'

/** A probe entry is sent this often; while the last one is not seen, this often. */
export const PROBE_EVERY_MS = 1000
const PROBE_AGAIN_MS = 250
/** The probe key outlives its instance this long, then Redis drops it. */
const PROBE_KEY_TTL_MS = 60_000

type StreamEntry = [id: string, fields: string[]]

/**
 * End-to-end proof that this instance receives, as centrifuge's delivery probes do: the publisher
 * adds a probe entry to a stream of this instance's own (`<key>:probe:<origin>`, one entry kept)
 * and the reader, which reads it beside the bus's stream, must see it. A connection that looks
 * ready but leads nowhere (a half-open socket, a dead NAT, a reader wedged in XREAD) shows as
 * probes that are not seen; nothing else in ioredis's state does.
 */
export class ReceiveProof {
  /** The probe stream's last id the reader has seen (the XREAD cursor beside the bus's). */
  cursor = '0-0'
  private provenAt: number
  private sentAt = -Infinity
  private inFlight = false

  constructor (
    readonly key: string,
    private readonly clock: () => number,
    /** Told each probe's write: null when Redis took it, else its error (an OOM refusal among them). */
    private readonly written: (error: Error | null) => void = () => {}
  ) {
    this.provenAt = clock()
  }

  /** Receiving counts as proven now (the reader starts): the first probe has its deadline from here. */
  restart (): void {
    this.provenAt = this.clock()
  }

  /**
   * Sends the next probe if one is due, one at a time: every PROBE_EVERY_MS, or sooner while the
   * last is not seen, so a healed connection proves itself within a moment of its first read.
   */
  send (publisher: RedisConnection): void {
    const now = this.clock()
    const every = this.silentMs() > PROBE_EVERY_MS ? PROBE_AGAIN_MS : PROBE_EVERY_MS
    if (this.inFlight || now - this.sentAt < every) return
    this.sentAt = now
    this.inFlight = true
    publisher.multi().xadd(this.key, 'MAXLEN', '1', '*', 't', String(now)).pexpire(this.key, PROBE_KEY_TTL_MS).exec()
      .then(() => this.written(null), (error: Error) => this.written(error))
      .finally(() => { this.inFlight = false })
  }

  /** The reader read these probe entries: receiving is proven as of when the newest was sent. */
  saw (entries: StreamEntry[]): void {
    for (const [id, fields] of entries) {
      this.cursor = id
      const sent = Number(fields[fields.indexOf('t') + 1])
      if (sent > this.provenAt) this.provenAt = sent
    }
  }

  /** How long since the newest probe the reader saw was sent (since the start, before the first). */
  silentMs (): number {
    return this.clock() - this.provenAt
  }
}
