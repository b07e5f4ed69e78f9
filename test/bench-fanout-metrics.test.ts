import { AB_MAX_STREAMS, measureMetricsAB, metricsABLine } from '../benchmarks/fanout/metrics-ab'
import t from 'tap'
import parsePrometheusTextFormat from 'parse-prometheus-text-format'
import { CONTENDERS } from '../benchmarks/lib/fanout/contenders'
import { metricsNote } from '../benchmarks/fanout/metrics-note'
import { benchEvent } from '../benchmarks/lib/fanout/payload'
import type { FanoutResults, FanoutRow } from '../benchmarks/fanout/report'
import { timeScrapes } from '../benchmarks/lib/fanout/scrape'
import { connect } from './fixtures/sse-connection'

t.test('the tower-sse+metrics contender serves /metrics, and a scrape is timed', async (t) => {
  const server = await CONTENDERS['tower-sse+metrics']({ maxClients: 10 })
  t.teardown(() => server.close())
  t.equal(server.metricsPath, '/metrics')
  const stream = await connect(server.port, '/events')
  t.teardown(() => stream.destroy())
  server.broadcast(benchEvent(0))
  const timing = await timeScrapes(server.port, '/metrics', 3)
  t.ok(timing.medianMs > 0 && timing.maxMs >= timing.medianMs, `scrape ${timing.medianMs} ms (max ${timing.maxMs} ms)`)
  const body = await (await fetch(`http://127.0.0.1:${server.port}/metrics`)).text()
  const streams = parsePrometheusTextFormat(body).find((f) => f.name === 'tower_sse_streams')
  t.equal(streams?.metrics[0].value, '1')
  await t.rejects(timeScrapes(server.port, '/nowhere', 1), /GET \/nowhere answered 404/)
})

t.test('the note under the table quotes the scrape and broadcast time with metrics ÷ without', async (t) => {
  const row = (contender: string, clients: number, broadcastMs: number, scrapeMs: number | null): FanoutRow =>
    ({ contender, clients, broadcastMs, scrapeMs, scrapeMaxMs: scrapeMs === null ? null : scrapeMs * 2 }) as unknown as FanoutRow
  const results = {
    rows: [row('tower-sse+metrics', 10_000, 10.3, 4.5), row('tower-sse', 10_000, 10, null), row('tower-sse+metrics', 1000, 1, 0.8)]
  } as unknown as FanoutResults
  t.same(metricsNote(results), [
    '- **tower-sse+metrics** at 1,000 streams: GET /metrics answered in 0.8 ms (median of 20, max 1.6 ms).',
    '- **tower-sse+metrics** at 10,000 streams: GET /metrics answered in 4.5 ms (median of 20, max 9 ms); broadcast ms with metrics ÷ without: ×1.030.'
  ])
})

t.test('the metrics A/B: both sides measured in turns, each in its own server process, the ratio of their medians reported against ±5%', async (t) => {
  const ab = await measureMetricsAB(20, 10, 2)
  t.same([ab.streams, ab.pairs], [20, 10])
  t.ok(ab.offP50Us > 0 && ab.onP50Us > 0 && ab.offP90Us >= ab.offP50Us && ab.onP90Us >= ab.onP50Us, `quantiles in µs: ${JSON.stringify(ab)}`)
  t.ok(ab.ratioP50 > 0 && Number.isFinite(ab.ratioP50), `on ÷ off at the median: ${ab.ratioP50}`)
  await t.rejects(measureMetricsAB(AB_MAX_STREAMS + 1, 1, 0), /at most 19000 streams per side/)
  const line = metricsABLine({ streams: 1000, pairs: 600, offP50Us: 100, onP50Us: 104, offP90Us: 120, onP90Us: 130, ratioP50: 1.04 })
  t.equal(line, '- **interleaved A/B** (one server process each, broadcasts in turns) at 1,000 streams, 600 broadcasts each: p50 100 µs without metrics, 104 µs with (p90 120 / 130 µs): ×1.040, within the ±5% target.')
  t.match(metricsABLine({ streams: 1000, pairs: 600, offP50Us: 100, onP50Us: 155, offP90Us: 120, onP90Us: 180, ratioP50: 1.55 }), /×1\.550, \*\*outside\*\* the ±5% target/)
})
