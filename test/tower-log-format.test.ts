import t, { type Test } from 'tap'
import { runCli } from './fixtures/tower-cli'

/** Starts the built Tower with stdout on a pipe, stops it with SIGTERM, returns its stdout lines. */
async function startAndStop (t: Test, args: string[], env: Record<string, string>): Promise<string[]> {
  const cli = runCli(args, { PORT: '0', ...env }, { built: true })
  t.teardown(() => cli.child.kill('SIGKILL'))
  await cli.line(/tower: listening on/)
  cli.child.kill('SIGTERM')
  t.same(await cli.exited, { code: 0, signal: null }, `${args.join(' ')} ${JSON.stringify(env)}: exit 0`)
  t.equal(cli.stderr(), '', 'nothing on stderr')
  return cli.stdout().trimEnd().split('\n')
}

t.test('--log-format pretty (over TOWER_LOG_FORMAT): a line a person reads, on a pipe too', async (t) => {
  const lines = await startAndStop(t, ['--log-format', 'pretty'], { TOWER_LOG_FORMAT: 'json' })
  t.equal(lines.length, 2, 'start-up and SIGTERM: two lines')
  // The time of day, the level and the message; no pid, host or colour (stdout is a pipe).
  t.match(lines[0], /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: tower: listening on http:\/\/127\.0\.0\.1:\d+, events at \/api\/events; bus memory; hosts /)
  t.match(lines[1], /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: tower: SIGTERM: ending 0 open streams and stopping$/)
  t.notMatch(lines.join('\n'), /[{}]|"level"|pid/, 'no JSON')
  t.notOk(lines.join('\n').includes('\u001b'), 'no escape codes')
})

for (const [how, args, env] of [
  ['--log-format json', ['--log-format', 'json'], {}],
  ['TOWER_LOG_FORMAT=json', [], { TOWER_LOG_FORMAT: 'json' }],
  ['nothing forced, stdout a pipe', [], {}]
] as const) {
  t.test(`${how}: one JSON record per line, as Fastify writes them`, async (t) => {
    const lines = await startAndStop(t, [...args], { ...env })
    t.equal(lines.length, 2, 'start-up and SIGTERM: two lines')
    t.match(lines.map((line) => JSON.parse(line)), [
      { level: 30, time: Number, pid: Number, hostname: String, msg: /^tower: listening on http:\/\/127\.0\.0\.1:\d+, events at / },
      { level: 30, msg: 'tower: SIGTERM: ending 0 open streams and stopping' }
    ])
  })
}

t.test('a bad --log-format stops start-up with one line', async (t) => {
  const cli = runCli(['--log-format', 'text'], {}, { built: true })
  t.teardown(() => cli.child.kill('SIGKILL'))
  t.equal((await cli.exited).code, 1)
  t.equal(cli.stderr(), 'tower: --log-format must be pretty or json, got "text"\n')
  t.equal(cli.stdout(), '')
})
