import http from 'node:http'
import t, { type Test } from 'tap'
import { StreamStats } from '../lib/observe/stats'
import type { Bus, BusMessage, BusRead, Deliver, Published, StartPoint } from '../lib/bus/bus'
import { encodeRetry } from '../lib/events/encoder'
import { formatEventId, parseEventId, type EventPosition } from '../lib/bus/event-id'
import { streamsOn, subscriberOn } from './fixtures/streams'
import { broadcast } from '../lib/streams/broadcast'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

/**
 * A shared bus whose history reads answer when the test says so: the one way to hold a resume's
 * read open while live events arrive, every time. (The Redis bus runs the same path in
 * bus-redis.test.ts, where the timing is Redis's.)
 */
class ControlledBus implements Bus {
  readonly shared = true
  private deliver: Deliver = () => 0
  private seq = 0
  readonly reads: Array<{ after: EventPosition, upTo: EventPosition, answer: (read: BusRead) => void, fail: (error: Error) => void }> = []

  async subscribe (deliver: Deliver): Promise<StartPoint> {
    this.deliver = deliver
    return { floor: { epoch: 'e', major: 0, minor: 0 }, last: null }
  }

  async publish (message: BusMessage): Promise<Published> {
    const position = { epoch: 'e', major: ++this.seq, minor: 0 }
    const id = formatEventId(position)
    return { id, delivered: this.deliver({ ...message, position, id }) }
  }

  read (after: EventPosition, upTo: EventPosition): Promise<BusRead> {
    return new Promise((resolve, reject) => this.reads.push({ after, upTo, answer: resolve, fail: reject }))
  }

  /** What the bus would hold: events `from`..`to` as they were published. */
  events (from: number, to: number): BusRead {
    const events = []
    for (let n = from; n <= to; n++) {
      const position = { epoch: 'e', major: n, minor: 0 }
      events.push({ position, id: formatEventId(position), data: `{"n":${n}}` })
    }
    return { kind: 'events', events }
  }

  stats (): ReturnType<Bus['stats']> {
    return { kind: 'redis', state: 'up', delivered: this.seq, reads: this.reads.length, lagMs: 0, discontinuities: 0, refusedPublishes: 0 }
  }

  receiving (): boolean {
    return true
  }

  async close (): Promise<void> {}
}

async function setup (t: Test, { maxBufferedBytes = 1e6 } = {}): Promise<{ bus: ControlledBus, registry: { broadcast: (data: unknown) => Promise<unknown>, readonly size: number }, stats: StreamStats, open: (lastEventId?: string) => Promise<SseConnection> }> {
  const bus = new ControlledBus()
  const stats = new StreamStats()
  const { registry: streams, fanOut } = streamsOn(bus, stats, { events: 1 })
  await fanOut.start()
  const registry = { broadcast: async (data: unknown) => await broadcast(bus, stats, data), get size () { return streams.size } }
  let clients = 0
  const server = http.createServer((req, res) => {
    const client = subscriberOn(res, { id: `c${++clients}`, maxBufferedBytes, finished: streams.remove })
    client.open(200, {}, encodeRetry(1000))
    streams.add(client)
    fanOut.resume(client, parseEventId(req.headers['last-event-id'] as string | undefined))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  const opened: SseConnection[] = []
  t.teardown(async () => {
    for (const c of opened) c.destroy()
    await fanOut.close()
    await new Promise((resolve) => server.close(resolve))
  })
  const open = async (lastEventId?: string): Promise<SseConnection> => {
    const c = await connect(port, '/', lastEventId === undefined ? {} : { 'last-event-id': lastEventId })
    opened.push(c)
    return c
  }
  return { bus, registry, stats, open }
}

const numbers = (c: SseConnection): number[] => c.events.map((e) => JSON.parse(e.data).n)

t.test('live events arriving while a resume reads the bus are held and follow the replay, none twice', async (t) => {
  const { bus, registry, open } = await setup(t)
  for (let n = 1; n <= 3; n++) await registry.broadcast({ n })
  const c = await open('e-1-0')
  await waitFor('the read to start', () => bus.reads.length === 1)
  t.same([bus.reads[0].after.major, bus.reads[0].upTo.major], [1, 3], 'reads from its id up to the newest delivered here')
  // A stream that is not resuming gets 4 and 5 from the same fan-out: once it has them, so would c.
  const witness = await open()
  await registry.broadcast({ n: 4 })
  await registry.broadcast({ n: 5 })
  await waitFor('the other stream to receive 4 and 5', () => numbers(witness).length === 2)
  t.same(numbers(c), [], 'nothing overtakes the replay')
  bus.reads[0].answer(bus.events(2, 3))
  await waitFor('replay then live', () => c.events.length === 4)
  t.same(numbers(c), [2, 3, 4, 5])
  await registry.broadcast({ n: 6 })
  await waitFor('live again', () => c.events.length === 5)
  t.same(numbers(c), [2, 3, 4, 5, 6])
})

t.test('a failed read is tried again while the stream stays open; a client gone meanwhile gets nothing', async (t) => {
  const { bus, registry, open } = await setup(t)
  for (let n = 1; n <= 4; n++) await registry.broadcast({ n })
  const c = await open('e-1-0')
  const quitter = await open('e-2-0')
  await waitFor('two reads', () => bus.reads.length === 2)
  bus.reads[0].fail(new Error('bus down'))
  quitter.destroy()
  await waitFor('the quitter to be removed', () => registry.size === 1)
  bus.reads[1].answer(bus.events(3, 4))
  await waitFor('the retry', () => bus.reads.length === 3)
  t.notOk(c.isEnded(), 'the stream stays open')
  bus.reads[2].answer(bus.events(2, 4))
  await waitFor('replay', () => c.events.length === 3)
  t.same(numbers(c), [2, 3, 4])
  t.same(numbers(quitter), [], 'the answer for a client that left is not written')
})

t.test('a gap the bus no longer holds is one resync; an id ahead of this instance skips what it already has', async (t) => {
  const { bus, registry, open } = await setup(t)
  for (let n = 1; n <= 3; n++) await registry.broadcast({ n })
  const gone = await open('e-1-0')
  await waitFor('the read', () => bus.reads.length === 1)
  await registry.broadcast({ n: 4 })
  bus.reads[0].answer({ kind: 'gone', reason: 'too-old' })
  await waitFor('the resync', () => gone.events.length === 1)
  t.equal(gone.events[0].event, 'resync')
  t.equal(gone.events[0].id, 'e-4-0', 'with the newest id, which covers what was held')
  const ahead = await open('e-6-0')
  await waitFor('the check of its id', () => bus.reads.length === 2)
  t.same([bus.reads[1].after, bus.reads[1].upTo], [{ epoch: 'e', major: 6, minor: 0 }, { epoch: 'e', major: 6, minor: 0 }], 'one read of its own id: does the bus hold it?')
  for (let n = 5; n <= 8; n++) await registry.broadcast({ n })
  bus.reads[1].answer({ kind: 'events', events: [] })
  await waitFor('the events after its id', () => ahead.events.length === 2)
  t.same(numbers(ahead), [7, 8], 'events up to its id are not sent again')
  t.equal(bus.reads.length, 2, 'no read of a range for a client that is ahead')
  const forged = await open('e-600-0')
  await waitFor('the check of the forged id', () => bus.reads.length === 3)
  bus.reads[2].answer({ kind: 'gone', reason: 'unknown' })
  await waitFor('its resync', () => forged.events.length === 1)
  t.same([forged.events[0].event, JSON.parse(forged.events[0].data).reason], ['resync', 'unknown'], 'an id the bus does not hold: a resync, never a muted stream')
  await waitFor('the resynced client to get live events', () => gone.events.length === 5)
})

t.test('a bus replay larger than the client\'s unsent-bytes budget is one resync, not a drop and the same replay on every reconnect', async (t) => {
  // Each frame is about 25 bytes: 3 fit in 200, 49 do not.
  const { bus, registry, stats, open } = await setup(t, { maxBufferedBytes: 200 })
  for (let n = 1; n <= 50; n++) await registry.broadcast({ n })
  const small = await open('e-47-0')
  await waitFor('the first read', () => bus.reads.length === 1)
  bus.reads[0].answer(bus.events(48, 50))
  await waitFor('the small replay', () => small.events.length === 3)
  t.same(numbers(small), [48, 49, 50], 'a replay within the budget is written')
  const large = await open('e-1-0')
  await waitFor('the second read', () => bus.reads.length === 2)
  bus.reads[1].answer(bus.events(2, 50))
  await waitFor('the resync', () => large.events.length === 1)
  t.same([large.events[0].event, large.events[0].id, JSON.parse(large.events[0].data).reason], ['resync', 'e-50-0', 'too-old'], 'resynced to the newest id')
  await registry.broadcast({ n: 51 })
  await waitFor('the next live event', () => large.events.length === 2)
  t.same([large.isEnded(), JSON.parse(large.events[1].data).n], [false, 51], 'the stream stays open and goes on live')
  const counted = stats.read({ current: 0, capacity: 10, historyEvents: 0, historyBytes: 0, openStreamBytes: 0, bus: bus.stats() }, { refusalsHeld: 0, stormLevel: 0 })
  t.same([counted.dropped, counted.resumes], [0, { replayed: 1, resync: 1, fresh: 0 }], 'no drop; one replay, one resync')
})
