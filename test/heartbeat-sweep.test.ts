import http from 'node:http'
import t from 'tap'
import { MemoryBus } from '../lib/bus/memory'
import { encodeRetry } from '../lib/events/encoder'
import { StreamStats } from '../lib/observe/stats'
import { Subscriber } from '../lib/streams/subscriber'
import { WriteCoalescer } from '../lib/streams/write-coalescer'
import { streamsOn } from './fixtures/streams'
import { listenOnLoopback } from './fixtures/loopback-server'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'
import { ALL_TOPICS } from '../lib/events/topic'
import { HISTORY_DEFAULTS } from '../lib/events/history-options'

// The one heartbeat over more streams than a slice (issue 32): beats are called by the test (the
// timer's period is the plugin's), and each stream's heartbeat() counts the turn it ran in.

/** What registry.ts documents: about 8 ms of the event loop a turn at 16 µs a stream. */
const SLICE = 500
const STREAMS = 600

t.test(`${STREAMS} streams: each heartbeat reaches every stream, at most ${SLICE} a turn, and the next one does too`, async (t) => {
  const { registry, fanOut, sweep } = streamsOn(new MemoryBus(HISTORY_DEFAULTS.idempotencyWindowMs), new StreamStats(), { capacity: STREAMS })
  await fanOut.start()
  const turn0 = { n: 0 }
  /** Heartbeats per turn of the event loop since the test began counting. */
  const perTurn = new Map<number, number>()
  class CountingSubscriber extends Subscriber {
    override heartbeat (frame: Buffer): void {
      perTurn.set(turn0.n, (perTurn.get(turn0.n) ?? 0) + 1)
      super.heartbeat(frame)
    }
  }
  const flush = new WriteCoalescer()
  let ids = 0
  const server = http.createServer((_req, res) => {
    ids++
    const client = new CountingSubscriber({ id: `c${ids}`, key: `k${ids}`, remoteAddress: undefined, broadcasts: true, grant: ALL_TOPICS, connectedAt: Date.now(), lifetime: null }, res,
      { maxBufferedBytes: 1e6, coalescer: flush, retryFrame: () => Buffer.alloc(0), finished: registry.remove })
    client.open(200, {}, encodeRetry(1000))
    registry.add(client)
  })
  const { port, close } = await listenOnLoopback(server)
  const streams: SseConnection[] = []
  t.teardown(async () => {
    for (const c of streams) c.destroy()
    sweep.stop()
    await fanOut.close()
    await close()
  })
  for (let i = 0; i < STREAMS; i += 100) streams.push(...await Promise.all(Array.from({ length: 100 }, () => connect(port, '/'))))
  await waitFor(`${STREAMS} streams`, () => registry.size === STREAMS)

  /** Beats once and counts the turns until every stream had its heartbeat; returns heartbeats per turn. */
  const beat = async (): Promise<number[]> => {
    perTurn.clear()
    turn0.n = 0
    // Queued before the beat, so each turn's tick runs ahead of that turn's slice.
    let ticking = true
    const tick = (): void => {
      turn0.n++
      if (ticking) setImmediate(tick)
    }
    setImmediate(tick)
    sweep.heartbeat()
    // A beat while the sweep is under way is left to it: nothing is swept twice.
    sweep.heartbeat()
    try {
      await waitFor('every stream swept', () => [...perTurn.values()].reduce((a, b) => a + b, 0) >= STREAMS)
    } finally {
      ticking = false
    }
    return [...perTurn.entries()].sort(([a], [b]) => a - b).map(([, n]) => n)
  }
  const first = await beat()
  t.same(first, [SLICE, STREAMS - SLICE], 'the first beat: one slice at once, the rest the next turn')
  const second = await beat()
  t.same(second, first, 'the second beat sweeps every stream again (the finished sweep let go of its handle)')
  await waitFor('two heartbeat comments on every stream', () => streams.every((c) => c.comments.length === 2))
  t.pass('each stream saw both heartbeats')
})
