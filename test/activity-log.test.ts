import { Writable } from 'node:stream'
import t from 'tap'
import { LogController, type FastifyBaseLogger } from 'fastify'
import { ActivityLog } from '../lib/observe/activity-log'
import { StreamStats } from '../lib/observe/stats'
import { startApp } from './fixtures/app'
import { connect, waitFor } from './fixtures/sse-connection'

/** A logger destination that keeps every line Fastify writes. */
function captureLines (): { lines: Array<Record<string, unknown>>, stream: Writable } {
  const lines: Array<Record<string, unknown>> = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line))
      callback()
    }
  })
  return { lines, stream }
}

t.test('a storm of 1,000 connects and refusals writes at most one summary line per window', async (t) => {
  const { lines, stream } = captureLines()
  const windowMs = 250
  const { app, port } = await startApp(
    { maxClients: 20, logIntervalMs: windowMs, maxAgeMs: 0, storm: { tarpitMs: 0 } },
    { logger: { level: 'info', stream }, logController: new LogController({ disableRequestLogging: true }) }
  )
  // Every window's flush counted, so the test waits for windows to pass instead of for time.
  const flush = ActivityLog.prototype.flush
  let windowsFlushed = 0
  ActivityLog.prototype.flush = function (...args) { windowsFlushed++; flush.apply(this, args) }
  t.teardown(() => { ActivityLog.prototype.flush = flush })
  const linesBeforeStorm = lines.length
  const started = Date.now()
  let attempts = 0
  const held: Array<{ destroy: () => void }> = []
  t.teardown(() => { for (const c of held) c.destroy() })
  while (attempts < 1000) {
    const batch = await Promise.all(Array.from({ length: 50 }, () => connect(port)))
    attempts += batch.length
    // Half the admitted clients leave at once, so the window sees connects, closes and refusals.
    const admitted = batch.filter((c) => c.status === 200)
    for (const c of admitted.slice(0, 10)) c.destroy()
    held.push(...admitted.slice(10))
    await Promise.all(batch.filter((c) => c.status !== 200).map((c) => c.ended))
  }
  // Once the server has seen every departure, the next window's summary is the storm's last.
  await waitFor(`the server to see ${held.length} streams still open`, () => app.sse.size === held.length, 10_000)
  const settledAt = windowsFlushed
  await waitFor('a window to end after the storm', () => windowsFlushed > settledAt, 10_000)
  const elapsed = Date.now() - started
  const summaries = lines.filter((l) => typeof l.tower_sse === 'object')
  const windows = Math.ceil(elapsed / windowMs) + 1
  t.ok(summaries.length >= 1, 'the storm was reported')
  t.ok(summaries.length <= windows, `${summaries.length} summary lines for ${windows} windows`)
  t.equal(lines.length - linesBeforeStorm, summaries.length, 'no other line was written: nothing per connection')
  const warned = summaries.filter((l) => l.level === 40)
  t.ok(warned.length >= 1, 'windows with refusals are logged at warn')
  const totals = summaries.reduce<Record<string, number>>((sum, l) => {
    for (const [k, v] of Object.entries(l.tower_sse as Record<string, unknown>)) if (typeof v === 'number') sum[k] = (sum[k] ?? 0) + v
    return sum
  }, {})
  const stats = app.sse.stats()
  t.equal(totals.accepted, stats.accepted, 'the summaries add up to every connect')
  t.equal(totals.rejected, stats.rejected, 'and to every refusal')
  t.equal(stats.accepted + stats.rejected, 1000)
  t.match(String(warned[0].msg), /^tower-sse: connection storm, \d+ connects\/min; busiest: ip:127\.0\.0\.1 ×\d+\. \d+ connects, \d+ closes .* \d+ rejected \(0 held\); \d+ open, peak \d+$/)
  t.same((warned[0].tower_sse as { storm: unknown }).storm, { busiestKeys: [{ key: 'ip:127.0.0.1', attempts: (warned[0].tower_sse as Record<string, number>).accepted + (warned[0].tower_sse as Record<string, number>).rejected }] },
    'the storm warning names the busiest client')
  // A quiet window writes nothing.
  const before = lines.length
  const quietFrom = windowsFlushed
  await waitFor('3 quiet windows to end', () => windowsFlushed >= quietFrom + 3, 10_000)
  t.equal(lines.length, before, 'quiet windows are silent')
  await app.close()
  t.comment(`${stats.accepted + stats.rejected} connects/refusals over ${elapsed} ms -> ${summaries.length} lines`)
})

/** A logger that records the level of each call. */
function levelRecorder (): { logger: FastifyBaseLogger, calls: Array<{ level: string, msg: string, summary: Record<string, unknown> }> } {
  const calls: Array<{ level: string, msg: string, summary: Record<string, unknown> }> = []
  const at = (level: string) => (obj: { tower_sse: Record<string, unknown> }, msg: string): void => { calls.push({ level, msg, summary: obj.tower_sse }) }
  return { logger: { info: at('info'), warn: at('warn') } as unknown as FastifyBaseLogger, calls }
}

t.test('a window with refusals is a warning even when it is no storm; one without is info', async (t) => {
  const { logger, calls } = levelRecorder()
  // 60,000 ms windows: two attempts are 2 connects/min, far below the storm threshold.
  const counts = new StreamStats()
  const log = new ActivityLog(counts, 60_000)
  counts.attempt('ip:a')
  counts.accepted(1)
  log.flush(logger, 1)
  counts.attempt('ip:a')
  counts.refused('capacity')
  log.flush(logger, 1)
  t.same(calls.map((c) => c.level), ['info', 'warn'])
  t.equal(calls[1].summary.storm, undefined, 'not reported as a storm')
  t.match(calls[1].msg, /^tower-sse: 0 connects, 0 closes .*, 1 rejected \(0 held\); 1 open, peak 1$/)
})
