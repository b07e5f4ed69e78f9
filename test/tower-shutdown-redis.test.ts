import t from 'tap'
import type { Redis } from 'ioredis'
import { RedisBus } from '../lib/bus/redis/redis-bus'
import { DEFAULTS } from '../lib/options'
import { startRedis } from '../benchmarks/lib/redis-server'
import { connect, waitFor } from './fixtures/sse-connection'
import { request } from './fixtures/tower'
import { runCli } from './fixtures/tower-cli'

// SIGTERM exits 0 within drainMs + 2 s whatever Redis is doing (issue 31, item 6): the CLI's own
// fallback exits 1 at drainMs + 2 s, so exit code 0 is the bound kept.

t.jobs = 3

for (const fault of ['killed', 'stopped (SIGSTOP)'] as const) {
  t.test(`Redis ${fault}: SIGTERM ends the streams and exits 0`, async (t) => {
    const redis = await startRedis()
    t.teardown(() => { if (fault !== 'killed') redis.resume(); return redis.stop() })
    const cli = runCli(['--drain-ms', '500', '--redis', redis.url], { PORT: '0' })
    t.teardown(() => cli.child.kill('SIGKILL'))
    const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(await cli.line(/tower: listening on/))?.[1])
    const stream = await connect(port)
    await stream.nextEvent(0)
    if (fault === 'killed') await redis.kill()
    else redis.pause()
    let bus = 'up'
    while (bus === 'up') bus = JSON.parse((await request(port, 'GET', '/api/ready')).body).bus
    // Killed: the reader waits between reconnects. Stopped: past the socket deadline, its connections are being torn down.
    if (fault !== 'killed') await new Promise((resolve) => setTimeout(resolve, 3000))
    cli.child.kill('SIGTERM')
    const { code, signal } = await cli.exited
    t.same({ code, signal }, { code: 0, signal: null }, `exit code 0: close() finished before the drainMs + 2 s fallback (stderr: ${cli.stderr().trim()})`)
    await waitFor('the stream to end', () => stream.isEnded())
  })
}

t.test('the bus closes while its reader waits between reconnects (ioredis emits no end for a cancelled reconnect)', async (t) => {
  const redis = await startRedis()
  t.teardown(() => redis.stop())
  const { publishTimeoutMs, maxPendingPublishes } = DEFAULTS.redis
  const { idempotencyWindowMs } = DEFAULTS.history
  // The backoff's random at its top: every reconnect waits the whole window.
  const bus = new RedisBus({ connection: redis.url, key: 'shut', historyEvents: 10, publishTimeoutMs, maxPendingPublishes, idempotencyWindowMs, random: () => 0.999, log: { warn: () => {}, info: () => {} } })
  await bus.subscribe(() => 0, () => {})
  const reader = (bus as unknown as { reader: Redis }).reader
  await redis.kill()
  await waitFor('the reader to wait for its next reconnect', () => reader.status === 'reconnecting')
  // Well inside ready()'s own 5 s bound, which is what the read loop waited for.
  const order: string[] = []
  const bound = new Promise<void>((resolve) => setTimeout(() => { order.push('4 s'); resolve() }, 4000).unref())
  await Promise.race([bus.close().then(() => order.push('closed')), bound])
  t.same(order, ['closed'], 'close() did not wait on the reconnect')
})
