import { createHook } from 'node:async_hooks'
import t from 'tap'
import { connect, waitFor } from './fixtures/sse-connection'
import type { SecondSample } from '../lib/tower/stats-window'
import { request, startTower } from './fixtures/tower'

async function stats (port: number): Promise<Record<string, any>> {
  const res = await request(port, 'GET', '/api/events/stats')
  if (res.status !== 200) throw new Error(`GET /api/events/stats answered ${res.status}: ${res.body}`)
  return JSON.parse(res.body)
}

t.test('stats count connects and refusals: totals, the last minute and the per-second series', async (t) => {
  const { app, port } = await startTower({ maxClients: 2, retryAfterSeconds: 1 })
  t.teardown(() => app.close())
  const before = await stats(port)
  t.same(before.lastMinute, { connects: 0, rejects: 0 })
  t.equal(before.capacity, 2)

  const open = [await connect(port), await connect(port)]
  const refused = [await connect(port), await connect(port), await connect(port)]
  t.same([...open, ...refused].map((c) => c.status), [200, 200, 503, 503, 503])

  const now = await stats(port)
  t.match(now, { current: 2, capacity: 2, peak: 2, accepted: 2, rejected: 3, lastMinute: { connects: 2, rejects: 3 } })
  t.same(Object.keys(app.sse.stats()).filter((key) => !(key in now)), [], 'every plugin counter is in the answer')

  // The series fills once the sampler's one-second timer has run: poll for up to 5 s.
  const total = (series: SecondSample[], field: 'connects' | 'rejects'): number => series.reduce((sum, s) => sum + s[field], 0)
  let series: SecondSample[] = []
  for (const deadline = Date.now() + 5000; total(series, 'connects') < 2 && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    series = (await stats(port)).perSecond
  }
  t.equal(total(series, 'connects'), 2, 'the sampled seconds hold both connects')
  t.equal(total(series, 'rejects'), 3, 'and the three refusals')
  for (const s of series) t.ok(Math.abs(s.t - Date.now()) < 60_000, 'each second is stamped with epoch ms')

  open[0].destroy()
  await waitFor('the disconnect to be counted', () => app.sse.size === 1)
  t.match(await stats(port), { current: 1, peak: 2, disconnected: 1 })
  open[1].destroy()
})

t.test('the stats route is plain JSON, not a stream, and does not count as a connect', async (t) => {
  const { app, port } = await startTower({ maxClients: 1 })
  t.teardown(() => app.close())
  const held = await connect(port)
  const res = await request(port, 'GET', '/api/events/stats')
  t.equal(res.status, 200, 'answers even when every stream slot is taken')
  t.match(res.headers['content-type'], /^application\/json/)
  t.equal(res.headers['cache-control'], 'no-store')
  t.equal(JSON.parse(res.body).accepted, 1)
  t.equal(app.sse.stats().rejected, 0)
  held.destroy()
})

t.test('closing Tower clears its timers, the stats sampler included', async (t) => {
  // Unref'd timers are invisible to process.getActiveResourcesInfo(): follow them with async_hooks.
  const live = new Set<number>()
  let tracking = true
  const hook = createHook({
    init: (id, type) => { if (tracking && type === 'Timeout') live.add(id) },
    destroy: (id) => { live.delete(id) }
  }).enable()
  t.teardown(() => { hook.disable() })
  const { app } = await startTower({ heartbeatMs: 60_000, logIntervalMs: 60_000 })
  tracking = false
  t.ok(live.size >= 3, `Tower started ${live.size} timers (heartbeat, log summary, stats sampler)`)
  await app.close()
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(live.size, 0, 'every one of them was cleared by close()')
})
