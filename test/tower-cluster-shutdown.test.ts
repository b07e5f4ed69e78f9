import t from 'tap'
import { startRedis } from '../benchmarks/lib/redis-server'
import { connect, waitFor } from './fixtures/sse-connection'
import { runCli } from './fixtures/tower-cli'

t.test('SIGTERM to a two-worker Tower: every worker closes and exits 0, with no false "close did not finish"', async (t) => {
  const redis = await startRedis()
  t.teardown(() => redis.stop())
  const cli = runCli(['--workers', '2', '--redis', redis.url, '--redis-key', 'shutdown1', '--drain-ms', '100'], { PORT: '0' })
  t.teardown(() => cli.child.kill('SIGKILL'))
  const listening = (): string[] => cli.stdout().split('\n').filter((line) => line.includes('tower: listening on'))
  await waitFor('two workers listening', () => listening().length === 2, 60_000)
  const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(listening()[0])?.[1])
  const pids = [...cli.stdout().matchAll(/tower: worker (\d+) started/g)].map((m) => Number(m[1])).sort()
  // Open streams, so the close has something to drain.
  const streams = await Promise.all([connect(port), connect(port), connect(port)])
  for (const s of streams) await s.nextEvent(0)

  cli.child.kill('SIGTERM')
  // Unfixed, each worker waits out drainMs + 2 s and then exits 1: the exit is what is awaited.
  t.same(await cli.exited, { code: 0, signal: null }, 'the primary exits 0')
  const exits = [...cli.stdout().matchAll(/tower: worker (\d+) exited \((.+)\)/g)].map((m) => [Number(m[1]), m[2]]).sort()
  t.same(exits, pids.map((pid) => [pid, 'code 0']), 'each worker exited with code 0')
  t.notMatch(cli.stderr(), /close did not finish|close failed/, `no false error: ${cli.stderr()}`)
  t.ok(streams.every((s) => s.isEnded()), 'the streams were ended by the close')
})
