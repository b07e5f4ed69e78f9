import t from 'tap'
import type { TowerStats } from '../lib/tower/stats-route'
import { startRedis, type RedisServer } from '../benchmarks/lib/redis-server'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'
import { notify, request, startTower } from './fixtures/tower'
import { runCli } from './fixtures/tower-cli'
import { parseConfig } from '../lib/tower/config'

let redis: RedisServer
t.before(async () => { redis = await startRedis() })
t.teardown(() => redis.stop())

/** GET /api/events/stats until `done` holds (instances report once a second), at most ~10 s. */
async function statsUntil (port: number, done: (stats: TowerStats) => boolean): Promise<TowerStats> {
  for (let i = 0; ; i++) {
    const stats = JSON.parse((await request(port, 'GET', '/api/events/stats')).body) as TowerStats
    if (done(stats) || i === 100) return stats
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

function listeningLines (stdout: string): string[] {
  return stdout.split('\n').filter((line) => line.includes('tower: listening on'))
}

t.test('--workers > 1 without --redis is a configuration error naming the setting (the CLI prints it as one line)', async (t) => {
  t.throws(() => parseConfig(['--workers', '4'], {}), { name: 'TowerConfigError', message: /^--workers 4 needs --redis \(or TOWER_REDIS_URL\)/ })
  t.throws(() => parseConfig([], { TOWER_WORKERS: '2' }), { message: /^TOWER_WORKERS 2 needs --redis/ })
  t.throws(() => parseConfig(['--workers', '0', '--redis', redis.url], {}), { message: '--workers must be between 1 and 64, got 0' })
  t.throws(() => parseConfig(['--redis', 'http://u:secret@host'], {}), { message: /^--redis: option "redis" must be a redis:\/\/, rediss:\/\/, redis\+sentinel:\/\/ or redis\+cluster:\/\/ URL, or an ioredis client or Cluster, got "http:\/\/…"$/ })
  const config = parseConfig([], { TOWER_WORKERS: '3', TOWER_REDIS_URL: redis.url })
  t.same([config.workers, config.sse.redis], [3, redis.url], 'from the environment too')
  t.equal(parseConfig([], {}).workers, 1, 'one process by default')
})

t.test('two workers on one port and one Redis: a notification reaches every stream; a killed worker is replaced', async (t) => {
  const cli = runCli(['--workers', '2', '--redis', redis.url, '--redis-key', 'cluster1'], { PORT: '0' })
  t.teardown(() => cli.child.kill('SIGKILL'))
  await waitFor('two workers listening', () => listeningLines(cli.stdout()).length === 2, 30_000)
  const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(listeningLines(cli.stdout())[0])?.[1])
  t.ok(port > 0)
  const pids = [...cli.stdout().matchAll(/tower: worker (\d+) started/g)].map((m) => Number(m[1]))
  t.equal(pids.length, 2)

  const streams: SseConnection[] = await Promise.all(Array.from({ length: 6 }, () => connect(port)))
  for (const s of streams) await s.nextEvent(0)
  const stats = await statsUntil(port, (s) => s.instances?.length === 2 && s.instances.reduce((sum, i) => sum + i.current, 0) === 6)
  t.same(stats.instances?.map((i) => i.pid).sort(), [...pids].sort(), 'stats list both workers')
  t.equal(stats.instances?.reduce((sum, i) => sum + i.current, 0), 6, 'whose streams add up to every open stream')
  t.same(stats.instances?.map((i) => i.bus), ['up', 'up'])
  const sent = JSON.parse((await notify(port, { type: 'ci', title: 'one', body: '' })).body)
  await waitFor('every stream, on both workers, to get it', () => streams.every((s) => s.events.length === 2))
  for (const s of streams) t.equal(JSON.parse(s.events[1].data).id, sent.id)
  t.ok(sent.delivered >= 1 && sent.delivered <= 5, `delivered counts the streams of the worker that took the POST (${sent.delivered})`)

  process.kill(pids[0], 'SIGKILL')
  await cli.line(new RegExp(`worker ${pids[0]} died \\(SIGKILL\\); starting another`))
  await waitFor('a replacement listening', () => listeningLines(cli.stdout()).length === 3, 30_000)
  await waitFor('the dead worker\'s streams to end', () => streams.some((s) => s.isEnded()))
  const open = streams.filter((s) => !s.isEnded())
  t.ok(open.length >= 1 && open.length < 6, `${open.length} streams were on the surviving worker`)
  const back = await Promise.all(streams.filter((s) => s.isEnded()).map(() => connect(port, '/api/events', { 'last-event-id': sent.id })))
  for (const s of back) await s.nextEvent(0)
  const second = JSON.parse((await notify(port, { type: 'ci', title: 'two', body: '' })).body)
  await waitFor('the next notification everywhere', () => [...open, ...back].every((s) => s.events.some((e) => e.id === second.id)))
  for (const s of back) t.same(s.events.filter((e) => e.event !== 'resync').map((e) => JSON.parse(e.data).title ?? 'connected'), ['connected', 'two'], 'resumed from its id: no resync, nothing twice')

  cli.child.kill('SIGTERM')
  t.same(await cli.exited, { code: 0, signal: null }, 'SIGTERM drains the workers and the primary exits 0')
  for (const s of [...open, ...back]) s.destroy()
})

t.test('notify answers 503 + Retry-After while Redis is down, and accepts again when it is back', async (t) => {
  const { app, port } = await startTower({ redis: { url: redis.url, key: 'notify503' } })
  t.teardown(() => app.close())
  t.equal((await notify(port, { type: 'ci', title: 'before', body: '' })).status, 200)
  await redis.kill()
  await waitFor('the bus to be down', () => app.sse.stats().bus.state === 'down')
  const refused = await notify(port, { type: 'ci', title: 'during', body: '' })
  t.equal(refused.status, 503)
  t.equal(refused.headers['retry-after'], '2')
  t.equal(JSON.parse(refused.body).code, 'TOWER_SSE_BUS_UNAVAILABLE')
  const stats = JSON.parse((await request(port, 'GET', '/api/events/stats')).body) as TowerStats
  t.equal(stats.bus.state, 'down', 'stats say the bus is down')
  t.same(stats.instances?.map((i) => i.bus), ['down'], 'and list this instance alone while Redis cannot be read')
  await redis.start()
  await waitFor('the bus to be up', () => app.sse.stats().bus.state === 'up', 10_000)
  t.equal((await notify(port, { type: 'ci', title: 'after', body: '' })).status, 200)
})
