import { spawn } from 'node:child_process'
import path from 'node:path'
import t from 'tap'
import { scrape } from './fixtures/scrape'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'
import { notify, startTower } from './fixtures/tower'

t.test('Tower answers GET /metrics in the Prometheus text format, with Node process metrics', async (t) => {
  const tower = await startTower()
  t.teardown(() => tower.app.close())
  // A second Tower in the same process: each has its own registry, nothing collides.
  const other = await startTower()
  t.teardown(() => other.app.close())
  const streams = await Promise.all([connect(tower.port), connect(tower.port)])
  t.teardown(() => { for (const s of streams) s.destroy() })
  t.equal((await notify(tower.port, { type: 'build', title: 'Built', body: 'ok' })).status, 200)
  await Promise.all(streams.map((s) => s.nextEvent(1)))

  const scraped = await scrape(tower.port)
  t.equal(scraped.status, 200)
  t.equal(scraped.contentType, 'text/plain; version=0.0.4; charset=utf-8')
  t.equal(scraped.value('tower_sse_streams'), 2)
  t.equal(scraped.value('tower_sse_connects_total'), 2)
  t.equal(scraped.value('tower_sse_broadcasts_total'), 1)
  t.equal(scraped.value('tower_sse_bytes_sent_total'), tower.app.sse.stats().bytesSent)
  t.equal(scraped.families.get('process_cpu_user_seconds_total')?.type, 'COUNTER', 'Node process metrics: CPU…')
  t.ok(scraped.value('process_resident_memory_bytes') > 0, '…memory…')
  t.ok(scraped.families.has('nodejs_eventloop_lag_seconds'), '…event loop lag')
  t.equal((await scrape(other.port)).value('tower_sse_streams'), 0, 'the other Tower counts its own streams')
})

t.test('with two cluster workers, one scrape of /metrics gives the cluster', async (t) => {
  const child = spawn(process.execPath, [...process.execArgv, path.join(__dirname, 'fixtures', 'cluster-tower.ts')], { stdio: ['pipe', 'pipe', 'inherit'] })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  t.teardown(async () => {
    child.stdin.end()
    await exited
  })
  let out = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  await waitFor('both workers to listen', () => /port (\d+)/.test(out), 30_000)
  const port = Number(/port (\d+)/.exec(out)?.[1])
  const streams: SseConnection[] = []
  t.teardown(() => { for (const s of streams) s.destroy() })
  for (let i = 0; i < 4; i++) streams.push(await connect(port))
  t.same(streams.map((s) => s.status), [200, 200, 200, 200])

  const scraped = await scrape(port)
  t.equal(scraped.status, 200)
  t.equal(scraped.value('tower_sse_streams'), 4, 'the streams of both workers, summed')
  t.equal(scraped.value('tower_sse_streams_capacity'), 400, 'two workers of 200 each')
  t.equal(scraped.value('tower_sse_connects_total'), 4)
  t.equal(scraped.value('tower_sse_storm'), 0)
})
