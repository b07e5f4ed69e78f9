import { formatEventId, newEpoch, type EventPosition } from '../event-id'
import { BusClosedError } from '../errors'
import type { Bus, BusMessage, BusRead, BusStats, Deliver, Published, StartPoint } from './bus'

const NOT_SUBSCRIBED: Deliver = () => 0

/**
 * One process, no storage: publish delivers in the same call, so a broadcast's frames are written
 * before broadcast() returns. The hub's ring is the only history, so read() has nothing more.
 */
export class MemoryBus implements Bus {
  readonly shared = false
  private readonly epoch: string
  private seq = 0
  private deliver: Deliver = NOT_SUBSCRIBED
  private closed = false

  constructor (now = Date.now()) {
    this.epoch = newEpoch(now)
  }

  async subscribe (deliver: Deliver): Promise<StartPoint> {
    this.deliver = deliver
    return { floor: { epoch: this.epoch, major: 0, minor: null }, last: null }
  }

  publish (message: BusMessage): Promise<Published> {
    if (this.closed) return Promise.reject(new BusClosedError())
    const position: EventPosition = { epoch: this.epoch, major: ++this.seq, minor: null }
    const id = formatEventId(position)
    const delivered = this.deliver({ ...message, position, id })
    return Promise.resolve({ id, delivered })
  }

  async read (after: EventPosition): Promise<BusRead> {
    const ours = after.epoch === this.epoch && after.minor === null && after.major <= this.seq
    return { kind: 'gone', reason: ours ? 'too-old' : 'unknown' }
  }

  stats (): BusStats {
    return { kind: 'memory', state: this.closed ? 'down' : 'up', delivered: this.seq, reads: 0, lagMs: 0 }
  }

  async close (): Promise<void> {
    this.closed = true
  }
}
