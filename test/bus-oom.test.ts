import t from 'tap'
import { Registry } from 'prom-client'
import { open, server } from './fixtures/bus-instances'
import { startApp } from './fixtures/app'
import type { RedisServer } from '../benchmarks/lib/redis-server'
import { waitFor } from './fixtures/sse-connection'
import { request, startTower } from './fixtures/tower'

// Out of memory made visible (issue 31, item 5): a Redis at maxmemory with noeviction refuses the
// bus's writes; the bus says 'oom' (stats, metric), logs one line when the spell starts and one when
// it ends, counts the refused publishes, keeps its streams, and is up again once memory is freed.

const FILLER_BYTES = 64 * 1024
const FILLERS = 100

/**
 * Fills Redis with other keys up to its limit, then lowers maxmemory below what it holds, so it
 * stays over it (a write refused at the limit alone can leave it just under once that client's buffers go).
 */
async function fill (redis: RedisServer): Promise<void> {
  for (let i = 0; i < FILLERS; i++) {
    const full = await redis.command('SET', `filler:${i}`, 'x'.repeat(FILLER_BYTES)).then(() => false, (error: Error) => /^OOM/.test(error.message))
    if (full) break
  }
  await redis.command('CONFIG', 'SET', 'maxmemory', String(1024 * 1024))
}

t.test('at maxmemory with noeviction: state oom, its metric, one log line each way, refusals counted, recovery once freed', async (t) => {
  const redis = await server(t, { args: ['--maxmemory', '3mb', '--maxmemory-policy', 'noeviction'] })
  const lines: string[] = []
  const metrics = new Registry()
  const started = await startApp({ metrics, redis: { url: redis.url, key: 'oom', deafCloseMs: 0 } }, { logger: { level: 'info', stream: { write: (line: string) => { lines.push(line) } } } })
  const { app } = started
  t.teardown(() => app.close())
  const logged = (pattern: RegExp): string[] => lines.filter((line) => pattern.test(line))
  t.match(logged(/maxmemory/), [/maxmemory is 3145728 bytes.*1000 entries.*4096000 bytes at 4096 bytes an entry/], 'start-up names maxmemory and what the stream can hold, once')
  const scrape = async (): Promise<Record<string, number>> => {
    const text = await metrics.metrics()
    const value = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1])
    return { up: value('tower_sse_bus_up'), oom: value('tower_sse_bus_out_of_memory'), refused: value('tower_sse_bus_refused_publishes_total') }
  }
  t.same(await scrape(), { up: 1, oom: 0, refused: 0 })
  const stream = await open(t, started)
  await waitFor('the stream to open', () => app.sse.size === 1)

  await fill(redis)
  await t.rejects(app.sse.broadcast({ n: 1 }), { code: 'TOWER_SSE_BUS_UNAVAILABLE', message: /OOM/ }, 'the broadcast is refused with Redis\'s words')
  await waitFor('the state to say oom', () => app.sse.stats().bus.state === 'oom')
  for (let i = 0; i < 3; i++) await t.rejects(app.sse.broadcast({ n: 2 + i }))
  t.equal(app.sse.stats().bus.refusedPublishes, 4, 'every refused publish counted')
  t.same(await scrape(), { up: 0, oom: 1, refused: 4 }, 'the metrics say so')
  t.equal(logged(/out of memory/).length, 1, 'one log line for the spell, not one per publish')

  // The probe cannot be written either: its silence must not count as deafness (busDeafCloseMs 0
  // closes a deaf instance's streams at once past the receive deadline). Probes every 250 ms while
  // silent: a dozen refused ones are well past that deadline.
  const execs = await redis.calls('exec')
  while (await redis.calls('exec') < execs + 12) await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(app.sse.stats().bus.state, 'oom', 'still oom, not down')
  t.notOk(stream.isEnded(), 'the stream stays open')
  t.equal(app.sse.stats().busDeaf, 0, 'never closed as deaf')
  const another = await open(t, started)
  await waitFor('a new stream admitted while oom', () => app.sse.size === 2)
  t.equal(app.sse.stats().refusals.busDeaf, 0, 'nor refused as deaf')
  another.destroy()
  await waitFor('its close seen', () => app.sse.size === 1)

  for (let i = 0; i < FILLERS; i++) await redis.command('DEL', `filler:${i}`)
  await redis.command('CONFIG', 'SET', 'maxmemory', '3mb')
  // The first write Redis takes ends the spell: this broadcast, or the next probe, whichever goes first.
  t.match(await app.sse.broadcast({ n: 9 }), { delivered: 1 }, 'broadcasts published again')
  await waitFor('the bus up again', () => app.sse.stats().bus.state === 'up')
  t.equal(logged(/takes writes again/).length, 1, 'one log line when the spell ends')
  // No probe could be written during the spell (over the receive deadline): its silence is no
  // deafness, and the deadline runs again from the spell's end, whichever write ended it.
  t.same(logged(/bus is down|bus is up again/), [], 'from oom straight back to up: never down in between')
  await waitFor('the broadcast on the stream', () => stream.events.some((e) => JSON.parse(e.data).n === 9))
  t.notOk(stream.isEnded(), 'the stream is still open')
  t.equal(app.sse.stats().busDeaf, 0, 'never closed as deaf as Redis recovered')
  t.same(await scrape(), { up: 1, oom: 0, refused: 4 })
})

t.test('Tower out of memory: /api/ready stays 200 with bus oom (every instance on that Redis is refused alike)', async (t) => {
  const redis = await server(t, { args: ['--maxmemory', '3mb', '--maxmemory-policy', 'noeviction'] })
  const tower = await startTower({ redis: { url: redis.url, key: 'oom-tower' } })
  t.teardown(() => tower.app.close())
  await fill(redis)
  await waitFor('the state to say oom', () => tower.app.sse.stats().bus.state === 'oom')
  const ready = await request(tower.port, 'GET', '/api/ready')
  t.same([ready.status, JSON.parse(ready.body)], [200, { ready: true, bus: 'oom' }])
})
