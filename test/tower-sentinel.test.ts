import t from 'tap'
import { parseRedisUrl, redactRedisUrl } from '../lib/bus/redis/url'
import { parseConfig } from '../lib/tower/config'
import type { TowerStats } from '../lib/tower/stats-route'
import { SentinelTopology } from '../benchmarks/lib/redis-topology'
import { connect, waitFor } from './fixtures/sse-connection'
import { notify, request, type RawResponse } from './fixtures/tower'
import { runCli } from './fixtures/tower-cli'

t.test('the Sentinel URL form: sentinels, master name, credentials and db', async (t) => {
  t.same(parseRedisUrl('redis+sentinel://127.0.0.1:26379,[::1]:26380,sentinel-3.local:5000/mymaster'), {
    kind: 'sentinel',
    sentinels: [{ host: '127.0.0.1', port: 26379 }, { host: '::1', port: 26380 }, { host: 'sentinel-3.local', port: 5000 }],
    name: 'mymaster',
    tls: false,
    db: 0
  })
  t.same(parseRedisUrl('rediss+sentinel://app:p%40ss@h:1/m?db=3&sentinelUsername=s&sentinelPassword=q%26r'), {
    kind: 'sentinel', sentinels: [{ host: 'h', port: 1 }], name: 'm', tls: true, db: 3, username: 'app', password: 'p@ss', sentinelUsername: 's', sentinelPassword: 'q&r'
  }, 'percent-decoded credentials; rediss+ for TLS')
  t.same(parseRedisUrl('redis+sentinel://:secret@h:1/m'), { kind: 'sentinel', sentinels: [{ host: 'h', port: 1 }], name: 'm', tls: false, db: 0, password: 'secret' }, 'a password without a user name')
  t.same(parseRedisUrl('rediss://u:p@h:6380/2'), { kind: 'server', url: 'rediss://u:p@h:6380/2' }, 'redis:// and rediss:// pass through to ioredis')
  const wrong: Array<[string, RegExp]> = [
    ['http://h:1/m', /^the Redis URL must be a redis:\/\/, rediss:\/\/, redis\+sentinel:\/\/ or redis\+cluster:\/\/ URL$/],
    ['redis+sentinel://h:1', /with \/mastername after the sentinels$/],
    ['redis+sentinel://h:1,h/m', /whose sentinels are host:port, not "h"$/],
    ['redis+sentinel://h:1,,h:2/m', /whose sentinels are host:port, not ""$/],
    ['redis+sentinel://h:0/m', /whose sentinel ports are 1-65535, not "h:0"$/],
    ['redis+sentinel://h:70000/m', /whose sentinel ports are 1-65535, not "h:70000"$/],
    ['redis+sentinel://h:1/', /whose master name is 1-100 characters .*, not ""$/],
    ['redis+sentinel://h:1/a b', /whose master name is .*, not "a b"$/],
    ['redis+sentinel://h:1/m?db=x', /whose db is an integer between 0 and 2147483647, not "x"$/],
    ['redis+sentinel://h:1/m?db=-1', /whose db is an integer .*, not "-1"$/],
    ['redis+sentinel://h:1/m?password=x', /with no parameters besides db, sentinelUsername, sentinelPassword, not "password"$/],
    ['redis+sentinel://u:%zz@h:1/m', /with valid percent-encoding in its password$/]
  ]
  for (const [url, message] of wrong) t.throws(() => parseRedisUrl(url), { name: 'RedisUrlError', message }, url)
})

t.test('passwords never reach a log line or an error', async (t) => {
  // Redaction itself is test/redis-url.test.ts's; here, that the option error shows only a scheme when the URL is refused.
  t.equal(redactRedisUrl('redis+sentinel://app:s3cret@h:1,h:2/m?db=1&sentinelPassword=t0p'), 'redis+sentinel://***@h:1,h:2/m?db=1&sentinelPassword=***')
  t.throws(() => parseConfig(['--redis', 'redis+sentinel://u:s3cret@h:1/a b'], {}), {
    name: 'TowerConfigError',
    message: '--redis: option "redis" must be a redis+sentinel:// URL whose master name is 1-100 characters of A-Z a-z 0-9 . _ : -, not "a b", or an ioredis client or Cluster, got "redis+sentinel://…"'
  })
  t.throws(() => parseConfig([], { TOWER_REDIS_URL: 'redis+sentinel://h:1/m?sentinelPassword=s3cret&db=x' }), { message: /^TOWER_REDIS_URL: .*whose db is .*got "redis\+sentinel:\/\/…"$/ })
  t.equal(parseConfig(['--redis', 'redis+sentinel://h:1,h:2/m'], {}).sse.redis, 'redis+sentinel://h:1,h:2/m', 'a valid one is kept as given')
})

/** A notify bounded in time: the old bus may hold one while its connection has not noticed the dead primary. */
function notifyWithin (port: number, title: string, ms: number): Promise<RawResponse | null> {
  return Promise.race([notify(port, { type: 'ci', title, body: '' }), new Promise<null>((resolve) => setTimeout(() => resolve(null), ms).unref())])
}

t.test('Tower on a Sentinel URL publishes, and publishes again after the primary dies and a replica takes over', async (t) => {
  const topology = await SentinelTopology.start()
  t.teardown(() => topology.stop())
  // Credentials the topology does not require (ioredis only warns): they are here to be redacted.
  const url = topology.url.replace('//', '//:s3cret@') + '?sentinelPassword=t0ps3cret'
  const cli = runCli(['--redis', url, '--redis-key', 'sentinel1'], { PORT: '0' })
  t.teardown(() => cli.child.kill('SIGKILL'))
  const line = await cli.line(/tower: listening on/)
  const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(line)?.[1])
  t.match(line, `bus redis+sentinel://***@127.0.0.1:${topology.sentinelPorts[0]},`, 'the start-up line names the bus')
  t.notMatch(cli.stdout() + cli.stderr(), /s3cret/, 'and no password')

  const stream = await connect(port)
  await stream.nextEvent(0)
  t.equal((await notify(port, { type: 'ci', title: 'before', body: '' })).status, 200)
  await waitFor('the first event on the stream', () => stream.events.length === 2)

  const oldPrimary = await topology.primaryPort()
  await topology.node(oldPrimary).kill()
  const newPrimary = await topology.failedOverFrom(oldPrimary, 20_000)
  t.not(newPrimary, oldPrimary, 'the sentinels promoted the replica')
  let answer: RawResponse | null = null
  for (let i = 0; i < 100 && answer?.status !== 200; i++) {
    answer = await notifyWithin(port, 'after', 2000)
    if (answer?.status !== 200) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.equal(answer?.status, 200, `notify accepted again on the new primary (last answer: ${answer?.status ?? 'none'})`)
  // The reader follows the sentinels on its own reconnect schedule (capped at 2 s, plus the connect
  // timeout of a dead primary): on a loaded machine that can take longer than the publish did.
  await waitFor('the event published after the failover on the stream', () => stream.events.some((e) => e.data.includes('"after"')), 25_000)
    .catch((error: Error) => { throw new Error(`${error.message}; the stream got ${JSON.stringify(stream.events.map((e) => [e.event, e.id, e.data.slice(0, 60)]))}, answer ${answer?.body ?? 'none'}`) })
  t.same(stream.events.filter((e) => e.event !== 'resync').map((e) => JSON.parse(e.data).title ?? 'connected'), ['connected', 'before', 'after'], 'the open stream got both, in order, once')
  // 'up' needs a probe read back by this instance's reader (the end-to-end proof), and the board
  // shows what each instance last reported: both can trail the first publish the new primary took.
  let stats: TowerStats | undefined
  const bothUp = async (): Promise<boolean> => {
    stats = JSON.parse((await request(port, 'GET', '/api/events/stats')).body) as TowerStats
    return stats.bus.state === 'up' && stats.instances?.every((i) => i.bus === 'up') === true
  }
  for (let i = 0; i < 150 && !(await bothUp()); i++) await new Promise((resolve) => setTimeout(resolve, 100))
  t.same([stats?.bus.state, stats?.instances?.map((i) => i.bus)], ['up', ['up']], 'the instance board reads the new primary too')
  stream.destroy()
  cli.child.kill('SIGTERM')
  t.same(await cli.exited, { code: 0, signal: null })
})
