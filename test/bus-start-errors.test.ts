import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { startApp } from './fixtures/app'
import { server } from './fixtures/bus-instances'
import { runCli } from './fixtures/tower-cli'

// Start-up says what happened (issue 31, item 7): one coded error per cause, naming where
// (never a password) and what, before the plugin's start-up timeout.

t.jobs = 3

/** The register's rejection, for a URL: its code and message. */
async function refusal (url: string): Promise<{ code: string, message: string }> {
  const started = startApp({ redis: { url, key: 'start' } })
  started.then(({ app }) => app.close(), () => undefined)
  const error = await started.then(() => null, (e: { code: string, message: string }) => e)
  if (error === null) throw new Error(`the register on ${url} did not fail`)
  return { code: error.code, message: error.message }
}

t.test('a wrong password and a missing one: named, with Redis\'s own word, no password shown', async (t) => {
  const redis = await server(t)
  await redis.command('CONFIG', 'SET', 'requirepass', 's3cret')
  const wrong = await refusal(`redis://:wr0ng@127.0.0.1:${redis.port}`)
  t.equal(wrong.code, 'TOWER_SSE_BUS_START')
  t.match(wrong.message, `cannot start the Redis bus on redis://***@127.0.0.1:${redis.port}: Redis refused the user name or password (WRONGPASS`)
  t.notMatch(wrong.message, /wr0ng/)
  const none = await refusal(redis.url)
  t.match(none.message, /Redis wants a password and the URL gives none \(NOAUTH\)/)
})

t.test('nothing listening, and an HTTP server at the address: each named', async (t) => {
  const empty = await refusal('redis://127.0.0.1:1')
  t.match(empty.message, 'cannot start the Redis bus on redis://127.0.0.1:1: nothing is listening there (connect ECONNREFUSED 127.0.0.1:1)')
  const web = http.createServer((_request, response) => response.end('hello'))
  await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve))
  t.teardown(() => web.close())
  const { port } = web.address() as AddressInfo
  t.match((await refusal(`redis://127.0.0.1:${port}`)).message, /: what answers there is not Redis \(Unknown RESP type 72 "H"/)
  // ioredis's Cluster says only "Failed to refresh slots cache.": a node's own connect says why.
  t.match((await refusal('redis+cluster://127.0.0.1:1,127.0.0.1:2')).message,
    /on redis\+cluster:\/\/127\.0\.0\.1:1,127\.0\.0\.1:2: no node of the cluster answered: nothing is listening there \(connect ECONNREFUSED 127\.0\.0\.1:[12]\)$/)
})

t.test('a stalled Redis (SIGSTOP): named as such, before the plugin\'s start-up timeout (10 s)', async (t) => {
  const redis = await server(t)
  redis.pause()
  t.teardown(() => redis.resume())
  const stalled = await refusal(redis.url)
  t.equal(stalled.code, 'TOWER_SSE_BUS_START', 'the bus\'s own error, not fastify-plugin\'s "did not start in time"')
  t.match(stalled.message, /Redis accepted the connection but answered nothing: a stalled server/)
})

t.test('a read-only ACL user: the dry run of the script names what it may not run, before any publish', async (t) => {
  const redis = await server(t)
  await redis.command('ACL', 'SETUSER', 'reader', 'on', '>pw', '~*', '+@read', '+@connection', '+evalsha', '+eval', '+info', '+time', '+multi', '+exec', '+config|get')
  const readOnly = await refusal(`redis://reader:pw@127.0.0.1:${redis.port}`)
  t.equal(readOnly.code, 'TOWER_SSE_BUS_START')
  t.match(readOnly.message, 'the Redis user may not run XADD {start}:stream, HSET {start}:meta, HINCRBY {start}:meta, SET {start}:idem:dry-run, XADD {start}:probe:')
  t.match(readOnly.message, /PEXPIRE {start}:probe:\S+ \(checked with ACL before the first publish\)/)
  t.equal(await redis.command('EXISTS', 'start:stream', 'start:meta'), 0, 'the dry run wrote nothing')
  await redis.command('ACL', 'SETUSER', 'reader', '+@write')
  const ok = await startApp({ redis: { url: `redis://reader:pw@127.0.0.1:${redis.port}`, key: 'start' } })
  t.teardown(() => ok.app.close())
  t.equal(ok.app.sse.stats().bus.state, 'up', 'with write permission the same user starts')
})

t.test('Tower\'s CLI prints the bus\'s line, not "cannot listen …: Connection is closed."', async (t) => {
  const cli = runCli(['--redis', 'redis://127.0.0.1:1'], { PORT: '0' })
  t.teardown(() => cli.child.kill('SIGKILL'))
  const { code } = await cli.exited
  t.equal(code, 1)
  t.equal(cli.stderr(), 'tower: cannot start the Redis bus on redis://127.0.0.1:1: nothing is listening there (connect ECONNREFUSED 127.0.0.1:1)\n', 'one line')
})
