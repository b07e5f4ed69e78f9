import t, { type Test } from 'tap'
import { startApp, type TestApp } from './fixtures/app'
import { server } from './fixtures/bus-instances'
import { connect } from './fixtures/sse-connection'
import type { TowerSseOptions } from '../lib'

// Every Last-Event-ID a client can send, answered alike by the memory bus and the Redis bus: a
// replay when the id is one the bus issued and still holds, else a resync as the stream's first
// event — never a fresh stream that silently misses what was published meanwhile, never a muted one.

interface Bus {
  name: string
  start: (t: Test, options: TowerSseOptions) => Promise<TestApp>
}

const BUSES: Bus[] = [
  { name: 'memory', start: async (t, options) => { const started = await startApp(options); t.teardown(() => started.app.close()); return started } },
  {
    name: 'redis',
    start: async (t, options) => {
      const redis = await server(t)
      const started = await startApp({ ...options, redis: { url: redis.url, key: 'hostile' } })
      t.teardown(() => started.app.close())
      return started
    }
  }
]

/** The stream's first event after resuming from `id`: its kind, and the resync's reason. */
async function firstAfter (port: number, id: string): Promise<[string, string | null]> {
  const c = await connect(port, '/api/events', { 'last-event-id': id })
  try {
    // A muted stream never gets its first event: a bound here fails the case instead of the file.
    const first = await Promise.race([c.nextEvent(0), new Promise<never>((_resolve, reject) => setTimeout(() => reject(new Error(`no first event for ${id}: a muted stream`)), 10_000).unref())])
    return [first.event ?? 'message', first.event === 'resync' ? (JSON.parse(first.data) as { reason: string }).reason : null]
  } finally {
    c.destroy()
  }
}

for (const bus of BUSES) {
  t.test(`${bus.name} bus: each hostile id gets a resync first; ids it issued and holds get their replay`, async (t) => {
    const { app, port } = await bus.start(t, { heartbeatMs: 60_000, history: { events: 5 } })
    const ids: string[] = []
    for (let n = 0; n < 10; n++) ids.push((await app.sse.broadcast({ n })).id)
    const last = ids[9]
    const epoch = last.split('-')[0]
    const numbers = last.split('-').slice(1).map(Number)
    const future = [epoch, numbers[0] + 1e12, ...numbers.slice(1)].join('-')
    const cases: Array<[string, string, [string, string | null]]> = [
      ['a per-request stream\'s own id', 'log:7', ['resync', 'unknown']],
      ['a number', '7', ['resync', 'unknown']],
      ['an id of another epoch', `zzzzzz${epoch.slice(6)}-${numbers.join('-')}`, ['resync', 'unknown']],
      ['an id of this epoch from the future', future, ['resync', 'unknown']],
      ['an id the ring and the bus no longer cover', ids[1], ['resync', 'too-old']],
      ['an id it holds', ids[7], ['message', null]]
    ]
    for (const [what, id, expected] of cases) t.same(await firstAfter(port, id), expected, `${what}: ${id.slice(0, 40)}`)
    const replayed = await connect(port, '/api/events', { 'last-event-id': ids[7] })
    await replayed.nextEvent(1)
    t.same(replayed.events.map((e) => JSON.parse(e.data).n), [8, 9], 'the replay after the id, in order, once')
    replayed.destroy()
  })
}

t.test('redis bus: a forged id of the current epoch costs Redis no more than a fresh stream does', async (t) => {
  const redis = await server(t)
  const { app, port } = await startApp({ heartbeatMs: 60_000, history: { events: 1000 }, maxBufferedBytes: 8 * 1024 * 1024, redis: { url: redis.url, key: 'forged' } })
  t.teardown(() => app.close())
  const data = 'x'.repeat(2048)
  const first = (await app.sse.broadcast(data)).id
  for (let n = 0; n < 999; n++) await app.sse.broadcast(data)
  const epoch = first.split('-')[0]
  // An id below every entry Redis holds, and one between two of them: neither is an entry.
  const forged = [`${epoch}-1-0`, `${first.split('-').slice(0, 2).join('-')}-999999`]
  const outputBytes = async (): Promise<number> => Number(/total_net_output_bytes:(\d+)/.exec(String(await redis.command('INFO', 'stats')))?.[1])
  const cost = async (headers: Record<string, string>): Promise<number> => {
    const before = await outputBytes()
    const c = await connect(port, '/api/events', headers)
    if (headers['last-event-id'] !== undefined) await c.nextEvent(0)
    c.destroy()
    return await outputBytes() - before
  }
  const fresh = await cost({})
  for (const id of forged) {
    const spent = await cost({ 'last-event-id': id })
    // The history a range read would return is 2 MB; probes and INFO itself are the noise.
    t.ok(spent < fresh + 16 * 1024, `${id}: ${spent} bytes out of Redis (a fresh stream: ${fresh})`)
  }
})
