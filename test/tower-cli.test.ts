import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import t from 'tap'
import { startRedis } from '../benchmarks/lib/redis-server'
import { connect, waitFor } from './fixtures/sse-connection'
import { notify } from './fixtures/tower'
import { runCli } from './fixtures/tower-cli'

// Each subtest waits on its own child processes: run them side by side to keep the file short.
t.jobs = 4

/** The start-up line is Fastify's one "listening" log line (pino JSON), made to carry the limits. */
function startupMessage (line: string): string {
  return JSON.parse(line).msg
}

t.test('starts, says where and with which limits, serves, and on SIGTERM ends every stream and exits 0', async (t) => {
  const cli = runCli(['--max-clients', '5', '--max-clients-per-key', '1'], { PORT: '0', TOWER_SSE_MAX_AGE_MS: '120000', TOWER_TRUST_PROXY: '127.0.0.1' })
  t.teardown(() => cli.child.kill('SIGKILL'))
  const message = startupMessage(await cli.line(/tower: listening on/))
  const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(message)?.[1])
  t.ok(port > 0, `listening on an ephemeral port: ${message}`)
  t.match(message, 'events at /api/events')
  t.match(message, /maxClients 5, maxClientsPerKey 1, retryMs 5000, retryAfterSeconds 5, .*storm\.tarpitMs 5000, .*maxAgeMs 120000, /)
  t.match(message, 'trustProxy 127.0.0.1 (X-Forwarded-For believed from these)')
  t.equal(cli.stdout().split('\n').filter((l) => l.includes('listening')).length, 1, 'one start-up line')

  // From a trusted proxy's address, X-Forwarded-For names the client (one stream per address).
  const from = (address: string): Record<string, string> => ({ 'x-forwarded-for': address })
  const clients = await Promise.all(['192.0.2.1', '192.0.2.2', '192.0.2.3'].map((address) => connect(port, '/api/events', from(address))))
  const second = await connect(port, '/api/events', from('192.0.2.1'))
  t.equal(second.status, 429, 'a second stream from one forwarded address is over its per-key limit')
  for (const c of clients) t.equal(JSON.parse((await c.nextEvent(0)).data).type, 'connected')
  const sent = JSON.parse((await notify(port, { type: 'ci', title: 'Green', body: 'all tests pass' })).body)
  t.equal(sent.delivered, 3)
  t.notMatch(cli.stdout(), /"req(uest)?"|incoming request|request completed/, 'no log line per request')

  cli.child.kill('SIGTERM')
  const { code, signal } = await cli.exited
  t.same({ code, signal }, { code: 0, signal: null }, 'exit code 0: close() finished before the drainMs + 2 s fallback')
  await Promise.all(clients.map((c) => c.ended))
  for (const c of clients) t.equal(JSON.parse((await c.nextEvent(1)).data).title, 'Green', 'the notification arrived before shutdown')
  t.equal(cli.stderr(), '', 'nothing on stderr')
})

/**
 * POSTs notifications one after another on one keep-alive connection until `stop()`; counts the
 * answers to requests sent once `counting()` is true, by status (0: no answer, connection refused).
 */
async function notifyLoop (port: number, stop: () => boolean, counting: () => boolean): Promise<Map<number, number>> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const statuses = new Map<number, number>()
  const body = JSON.stringify({ type: 'ci', title: 'loop', body: '' })
  for (let i = 0; i < 20_000 && !stop(); i++) {
    const counted = counting()
    const status = await new Promise<number>((resolve) => {
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/api/notify', agent, headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode ?? 0))
      })
      req.on('error', () => resolve(0))
      req.end(body)
    })
    if (counted) statuses.set(status, (statuses.get(status) ?? 0) + 1)
  }
  agent.destroy()
  return statuses
}

t.test('--drain-ms 3000: SIGTERM drains every stream, logs a summary, not a line per request, and exits 0', async (t) => {
  const cli = runCli(['--drain-ms', '3000', '--log-interval-ms', '600000'], { PORT: '0' })
  t.teardown(() => cli.child.kill('SIGKILL'))
  const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(startupMessage(await cli.line(/tower: listening on/)))?.[1])
  const clients = await Promise.all([connect(port), connect(port), connect(port), connect(port)])
  let exited = false
  void cli.exited.then(() => { exited = true })
  // Keeps posting through the drain: Tower turns return503OnClosing off, so its routes answer
  // (and log nothing) while it closes, instead of Fastify's bare 503.
  let signalled = false
  const loop = notifyLoop(port, () => exited, () => signalled)
  await waitFor('the loop to be under way', () => cli.stdout().length > 0)
  signalled = true
  cli.child.kill('SIGTERM')
  const { code, signal } = await cli.exited
  t.same({ code, signal }, { code: 0, signal: null }, 'exit code 0: close() finished the whole 3 s drain')
  t.equal(cli.stderr(), '', 'nothing on stderr')
  await Promise.all(clients.map((c) => c.ended))
  const statuses = await loop
  t.ok((statuses.get(200) ?? 0) > 0, `notifications were still taken while closing: ${JSON.stringify([...statuses])}`)
  t.same([...statuses.keys()].filter((status) => status !== 200 && status !== 0), [], 'and nothing else was answered (0: the server had stopped listening)')
  const lines = cli.stdout().trim().split('\n').map((line) => JSON.parse(line).msg as string)
  t.equal(lines.length, 3, 'three lines: start-up, SIGTERM, the final summary')
  if (lines.length !== 3) t.comment(lines.slice(0, 5).join('\n'))
  t.match(lines[1], 'tower: SIGTERM: ending 4 open streams and stopping')
  const summary = JSON.parse(cli.stdout().trim().split('\n')[2]).tower_sse
  t.equal(summary.shutdown, 4, 'the summary counts the 4 streams ended by the drain')
})

t.test('a bad value exits 1 with a one-line message naming it', async (t) => {
  const runs: Array<[string[], Record<string, string>, string]> = [
    // Every kind of bad flag and variable is covered by tower-config.test.ts; here, that it stops start-up.
    [['--max-clients', '0'], {}, 'tower: --max-clients: option "maxClients" must be an integer >= 1, got 0\n'],
    // Fastify would throw its duplicate-route error while loading plugins, where nothing can catch it.
    [[], { TOWER_SSE_PATH: '/:name' }, 'tower: TOWER_SSE_PATH: "/:name" is the dashboard\'s files (/:name); the event stream needs a path of its own\n'],
    // TEST-NET-1: no interface here has it, so binding fails locally and nothing is sent.
    [['--host', '192.0.2.1', '--port', '0'], {}, 'tower: address 192.0.2.1 is not available on this machine\n']
  ]
  await Promise.all(runs.map(async ([args, env, expected]) => {
    const cli = runCli(args, env)
    t.teardown(() => cli.child.kill('SIGKILL'))
    const { code } = await cli.exited
    t.equal(code, 1, `${args.join(' ')} ${JSON.stringify(env)}: exit code 1`)
    t.equal(cli.stderr(), expected)
    t.equal(cli.stdout(), '', 'nothing started')
  }))
})

t.test('a port already in use exits 1 with one line and no stack trace', async (t) => {
  const blocker = net.createServer()
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
  t.teardown(() => blocker.close())
  const port = (blocker.address() as net.AddressInfo).port
  const cli = runCli(['--port', String(port)])
  // Were the run cut short, this child would otherwise listen on the port once the blocker closes.
  t.teardown(() => cli.child.kill('SIGKILL'))
  const { code } = await cli.exited
  t.equal(code, 1)
  t.equal(cli.stderr(), `tower: port ${port} on 127.0.0.1 is already in use\n`)
  t.notMatch(cli.stdout(), /listening/)
})

t.test('--help prints the usage and exits 0 without listening', async (t) => {
  const cli = runCli(['--help'])
  t.teardown(() => cli.child.kill('SIGKILL'))
  const { code } = await cli.exited
  t.equal(code, 0)
  t.match(cli.stdout(), /^Usage: tower \[options\]/)
  t.match(cli.stdout(), /--max-clients <integer>\s+TOWER_SSE_MAX_CLIENTS\s+200/)
  t.equal(cli.stderr(), '')
})

/** What every local user reads of a process: its arguments, NUL-separated. */
function commandLine (pid: number | undefined): string {
  return readFileSync(`/proc/${String(pid)}/cmdline`, 'utf8').split('\0').join(' ')
}

const portOf = (line: string): number => Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(startupMessage(line))?.[1])

t.test('--token-file keeps the token out of the command line; --token and a Redis password there are warned about', async (t) => {
  const token = 'kept-0ut-of-cmdline-7f3a'
  const dir = mkdtempSync(path.join(tmpdir(), 'tower-cli-token-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'token')
  writeFileSync(file, `${token}\n`)
  chmodSync(file, 0o600)
  const redis = await startRedis()
  t.teardown(() => redis.stop())
  await redis.command('ACL', 'SETUSER', 'tower', 'on', '>redis-pa55word', '~*', '&*', '+@all')
  const passwordUrl = redis.url.replace('//', '//tower:redis-pa55word@')

  const fromFile = runCli(['--token-file', file, '--redis-key', 'token-file'], { PORT: '0', TOWER_REDIS_URL: passwordUrl })
  const asFlags = runCli(['--token', token, '--redis', passwordUrl, '--redis-key', 'token-flag'], { PORT: '0' })
  t.teardown(() => { fromFile.child.kill('SIGKILL'); asFlags.child.kill('SIGKILL') })
  const [fileLine, flagLine] = await Promise.all([fromFile.line(/tower: listening on/), asFlags.line(/tower: listening on/)])

  const fileArgs = commandLine(fromFile.child.pid)
  t.match(fileArgs, `--token-file ${file}`, 'the path is in the command line')
  t.notMatch(fileArgs, token, 'the token is not')
  t.notMatch(fileArgs, 'redis-pa55word', 'nor the Redis password (TOWER_REDIS_URL)')
  t.match(commandLine(asFlags.child.pid), `--token ${token}`, 'given as a flag, every local user reads it')
  t.match(commandLine(asFlags.child.pid), 'redis-pa55word')

  const port = portOf(fileLine)
  const note = { type: 'ci', title: 'Green', body: '' }
  t.equal((await notify(port, note)).status, 401, 'the token from the file is required')
  t.equal((await notify(port, note, undefined, { authorization: 'Bearer wrong' })).status, 401)
  t.equal((await notify(port, note, undefined, { authorization: `Bearer ${token}` })).status, 200, 'and is the one read from it')
  t.equal((await notify(portOf(flagLine), note, undefined, { authorization: `Bearer ${token}` })).status, 200)

  const warnings = (cli: typeof fromFile): string[] => cli.stdout().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l)).filter((l) => l.level === 40).map((l) => l.msg)
  t.same(warnings(fromFile), [], 'no warning when nothing secret is in the command line')
  t.same(warnings(asFlags), [
    'tower: --token is in the command line, which every local user can read (ps, /proc/<pid>/cmdline): use --token-file or TOWER_TOKEN',
    'tower: the password in --redis is in the command line, which every local user can read (ps, /proc/<pid>/cmdline): use TOWER_REDIS_URL'
  ])
  t.notMatch(fromFile.stdout() + asFlags.stdout() + fromFile.stderr() + asFlags.stderr(), /kept-0ut|redis-pa55word/, 'no log line shows a secret')
  t.match(startupMessage(flagLine), `bus redis://***@127.0.0.1:${redis.port}`)
})
