/**
 * The cluster primary's restart rules (lib/tower/cluster.ts) on a clock the test moves, with
 * plain-JS workers that start in milliseconds: a crash budget per minute, and start failures
 * retried after a growing, jittered delay that starts again once a worker has listened.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { waitFor } from './fixtures/sse-connection'

interface Primary {
  child: ReturnType<typeof spawn>
  out: () => string
  lines: (pattern: RegExp) => string[]
  exited: Promise<number | null>
  /** The file start-fail-worker.js counts its failed starts in. */
  failures: string
}

/** test/fixtures/primary.ts (runPrimary on a clock the test moves) with workers that fail their first `startFailures` starts. */
function startPrimary (t: Test, startFailures: number): Primary {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tower-start-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const failures = path.join(dir, 'failures')
  const env = { ...process.env, START_FAILURES: String(startFailures), START_FAILURES_FILE: failures }
  const child = spawn(process.execPath, [...process.execArgv, path.join(__dirname, 'fixtures', 'primary.ts')], { env, stdio: ['pipe', 'pipe', 'inherit'] })
  t.teardown(() => child.kill('SIGKILL'))
  let out = ''
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)))
  return { child, out: () => out, lines: (pattern) => out.split('\n').filter((line) => pattern.test(line)), exited, failures }
}

/** Kills the newest listening worker and waits until the primary has said what it does about it. */
async function crash (primary: Primary, listened: number): Promise<void> {
  const pid = Number(/^primary: worker (\d+) listening/.exec(primary.lines(/^primary: worker \d+ listening/)[listened - 1])?.[1])
  process.kill(pid, 'SIGKILL')
  await waitFor(`the primary to answer worker ${pid}'s crash`, () => primary.lines(new RegExp(`worker ${pid} died|giving up`)).length > 0, 10_000)
}

t.test('a worker that exits before it listens is started again after a growing delay, not counted as a crash', async (t) => {
  // 4 start-up failures: one more than the crash budget of one worker (3 per minute).
  const primary = startPrimary(t, 4)
  const listening = (): number => primary.lines(/^primary: worker \d+ listening/).length
  await waitFor('a worker listening after 4 failed starts', () => listening() === 1 || primary.child.exitCode !== null, 60_000)
  t.notOk(/giving up/.test(primary.out()), 'the primary did not give up')
  if (primary.child.exitCode !== null) return
  const delays = (): number[] => primary.lines(/before it listened; starting another in \d+ ms$/).map((line) => Number(/in (\d+) ms$/.exec(line)?.[1]))
  t.equal(delays().length, 4, 'each failed start was retried')
  t.ok(delays().every((ms, i) => ms >= 125 * 2 ** i && ms <= 250 * 2 ** i), `delays grow, jittered: ${delays().join(', ')}`)
  // A worker that had listened and then dies is a crash: replaced at once.
  const pid = Number(/^primary: worker (\d+) listening/m.exec(primary.out())?.[1])
  await crash(primary, 1)
  await waitFor('the crashed worker replaced', () => listening() === 2, 60_000)
  t.equal(primary.lines(new RegExp(`worker ${pid} died \\(SIGKILL\\); starting another$`)).length, 1)
  // Its replacement listened, so the next start failure is the first of a new run: the shortest delay.
  fs.writeFileSync(primary.failures, '3')
  await crash(primary, 2)
  await waitFor('a fifth failed start, retried', () => delays().length === 5, 10_000)
  t.ok(delays()[4] >= 125 && delays()[4] <= 250, `after a worker listened, the delay starts again from 125-250 ms: ${delays()[4]}`)
  await waitFor('its replacement listening', () => listening() === 3, 60_000)
  primary.child.kill('SIGTERM')
  await waitFor('the primary to stop on SIGTERM', () => primary.child.exitCode !== null, 10_000)
  t.equal(await primary.exited, 0, 'SIGTERM stops it')
})

t.test('the crash budget: 3 crashes within a minute are replaced, the 4th gives up; a crash more than 60 s ago no longer counts', async (t) => {
  const primary = startPrimary(t, 0)
  let listened = 0
  const crashAndReplace = async (): Promise<void> => {
    await crash(primary, listened)
    await waitFor('the crashed worker replaced', () => primary.lines(/^primary: worker \d+ listening/).length === listened + 1, 30_000)
    listened++
  }
  const advance = async (ms: number): Promise<void> => {
    const clock = Number(/clock (\d+)\n$/.exec(primary.out())?.[1] ?? 0) + ms
    primary.child.stdin?.write(`advance ${ms}\n`)
    await waitFor(`the primary's clock to read ${clock}`, () => primary.out().includes(`clock ${clock}\n`))
  }
  await waitFor('the first worker listening', () => primary.lines(/^primary: worker \d+ listening/).length === 1, 60_000)
  listened = 1
  await crashAndReplace()
  // More than a minute later that crash is out of the window: three more are replaced (a window
  // that never slid would give up at the third of them, the 4th crash in all).
  await advance(60_001)
  for (let i = 0; i < 3; i++) await crashAndReplace()
  t.equal(primary.lines(/died \(SIGKILL\); starting another$/).length, 4, 'four crashes replaced: one, then three a minute later')
  t.notOk(/giving up/.test(primary.out()))
  await crash(primary, listened)
  await waitFor('the primary to give up and exit after the 4th crash within a minute', () => primary.child.exitCode !== null, 10_000)
  t.equal(await primary.exited, 1, 'the 4th crash within one minute: the primary gives up')
  t.match(primary.out(), /died \(SIGKILL\) after 3 restarts in 60 s; giving up/)
})
