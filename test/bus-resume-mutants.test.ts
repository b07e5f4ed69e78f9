/**
 * Resume promises of the Redis bus, each pinned where a broken line would otherwise go unseen:
 * through the plugin's public surface (streams, resync reasons, stats) on a real redis-server.
 */
import { spawn } from 'node:child_process'
import path from 'node:path'
import t, { type Test } from 'tap'
import type { TowerSseOptions } from '../lib'
import { startApp, type TestApp } from './fixtures/app'
import { startRedis, type RedisServer } from '../benchmarks/lib/redis-server'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

let redis: RedisServer
let keys = 0

t.before(async () => { redis = await startRedis() })
t.teardown(() => redis.stop())

async function instance (t: Test, key: string, options: TowerSseOptions = {}): Promise<TestApp> {
  const started = await startApp({ heartbeatMs: 60_000, ...options, redis: { url: redis.url, key } })
  t.teardown(() => started.app.close())
  return started
}

/** Publishes n events ({ n: 0 }…) and returns their ids. */
async function publish (app: TestApp, count: number): Promise<string[]> {
  const ids: string[] = []
  for (let n = 0; n < count; n++) ids.push((await app.app.sse.broadcast({ n })).id)
  return ids
}

/** The Redis stream id inside an event id (`<epoch>-<ms>-<seq>`). */
function streamIdOf (id: string): string {
  return id.slice(id.indexOf('-') + 1)
}

function resyncReason (c: SseConnection): string | undefined {
  const first = c.events[0]
  return first?.event === 'resync' ? (JSON.parse(first.data) as { reason: string }).reason : undefined
}

t.test('after FLUSHALL a stale id is of an epoch that is gone: resync "unknown", and Redis is not read', async (t) => {
  const key = `flush${++keys}`
  const a = await instance(t, key)
  const [, stale] = await publish(a, 3)
  await redis.command('FLUSHALL')
  const [fresh] = await publish(a, 1)
  t.not(fresh.split('-')[0], stale.split('-')[0], 'the first publish after FLUSHALL starts a new epoch')
  const xrange = await redis.calls('xrange')
  const reads = a.app.sse.stats().bus.reads
  const resumed = await connect(a.port, '/api/events', { 'last-event-id': stale })
  t.teardown(() => resumed.destroy())
  await resumed.nextEvent(0)
  t.equal(resyncReason(resumed), 'unknown', 'resync, because the id belongs to a history that no longer exists')
  t.equal(JSON.parse(resumed.events[0].data).lastEventId, fresh, 'carrying the newest id')
  t.equal(await redis.calls('xrange') - xrange, 0, 'no XRANGE')
  t.equal(a.app.sse.stats().bus.reads - reads, 0, 'no bus read')
})

t.test('entries deleted around the client\'s id: the read cannot prove continuity, so a resync "too-old", never a silent skip', async (t) => {
  const key = `xdel${++keys}`
  const a = await instance(t, key)
  const ids = await publish(a, 10)
  // A new instance's ring starts at the newest event: a resume from 5 must read Redis.
  const late = await instance(t, key, { history: { events: 20 } })
  t.equal(await redis.command('XDEL', `{${key}}:stream`, ...[4, 5, 6].map((n) => streamIdOf(ids[n]))), 3)
  const resumed = await connect(late.port, '/api/events', { 'last-event-id': ids[5] })
  t.teardown(() => resumed.destroy())
  await resumed.nextEvent(0)
  t.equal(resyncReason(resumed), 'too-old', `first event: ${resumed.events[0].event ?? 'message'} ${resumed.events[0].data}`)
  await a.app.sse.broadcast({ n: 10 })
  await resumed.nextEvent(1)
  t.same(resumed.events.map((e) => e.event ?? JSON.parse(e.data).n), ['resync', 10], 'then live events; 7-9 are not replayed behind a gap')
})

t.test('3 clients resuming from one id while the read is held open share that one read', async (t) => {
  const key = `flight${++keys}`
  const a = await instance(t, key)
  const ids = await publish(a, 10)
  const late = await instance(t, key)
  const pid = Number(/process_id:(\d+)/.exec(String(await redis.command('INFO', 'server')))?.[1])
  t.ok(pid > 0, 'redis-server pid from INFO')
  const xrange = await redis.calls('xrange')
  // A stopped redis-server holds every command open until it continues.
  process.kill(pid, 'SIGSTOP')
  t.teardown(() => { try { process.kill(pid, 'SIGCONT') } catch {} })
  const resumers: SseConnection[] = []
  t.teardown(() => { for (const c of resumers) c.destroy() })
  resumers.push(await connect(late.port, '/api/events', { 'last-event-id': ids[2] }))
  await waitFor('the first resume to start its bus read', () => late.app.sse.stats().bus.reads === 1)
  for (let i = 0; i < 2; i++) resumers.push(await connect(late.port, '/api/events', { 'last-event-id': ids[2] }))
  await waitFor('3 streams open', () => late.app.sse.size === 3)
  t.equal(late.app.sse.stats().bus.reads, 1, 'the two later resumes joined the read in flight')
  process.kill(pid, 'SIGCONT')
  await waitFor('every replay', () => resumers.every((c) => c.events.length === 7))
  t.equal(await redis.calls('xrange') - xrange, 2, 'one read for 3 resumes (two XRANGEs: the id, then the range)')
  for (const c of resumers) t.same(c.events.map((e) => JSON.parse(e.data).n), [3, 4, 5, 6, 7, 8, 9])
})

t.test('a resume whose bus read keeps failing retries on a timer that does not keep the process alive', async (t) => {
  const child = spawn(process.execPath, [...process.execArgv, path.join(__dirname, 'fixtures', 'resume-retry-leaves.ts')], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => child.kill('SIGKILL'))
  let out = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)))
  // Starting the fixture can be slow on a busy machine; the exit itself follows at once.
  await waitFor('the fixture to start resuming', () => out.includes('resuming\n') || child.exitCode !== null, 30_000)
  await waitFor('the process to exit with only the retry timer left (it would retry every ~1 s forever)', () => child.exitCode !== null, 5000)
  t.equal(await exited, 0)
  t.match(out, /exiting after 1 read\(s\)/, 'its read failed once and a retry was scheduled')
})
