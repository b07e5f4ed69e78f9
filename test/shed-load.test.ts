import { spawn } from 'node:child_process'
import t from 'tap'
import { EventSource } from 'eventsource'
import { countTimeWait } from '../benchmarks/lib/time-wait'
import { startApp } from './fixtures/app'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Clients in another process, as in the incident: each of `loops` loops opens a request on a new
 * connection, reads the answer to its end as Node's http client does (it closes its side as soon
 * as a `Connection: close` response ends), and goes again. Resolves with the statuses seen.
 */
function clientLoops (port: number, loops: number, perLoop: number): Promise<Record<string, number>> {
  const script = `
    const http = require('node:http')
    const statuses = {}
    const once = () => new Promise((resolve) => {
      const request = http.get({ host: '127.0.0.1', port: ${port}, path: '/api/events', agent: false }, (response) => {
        statuses[response.statusCode] = (statuses[response.statusCode] ?? 0) + 1
        response.resume()
        response.once('end', resolve)
        response.once('close', resolve)
      })
      request.once('error', resolve)
    })
    Promise.all(Array.from({ length: ${loops} }, async () => { for (let i = 0; i < ${perLoop}; i++) await once() }))
      .then(() => process.stdout.write(JSON.stringify(statuses)))`
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (chunk: Buffer) => { out += chunk })
    child.once('exit', (code) => code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`client loops exited with ${code}`)))
  })
}

t.test('the server closes first: refusals and expiries leave no client-side TIME_WAIT', async (t) => {
  const { app, port } = await startApp({ maxClients: 20, maxAgeMs: 200, maxAgeJitterMs: 100, tarpitMs: 0 })
  t.teardown(() => app.close())
  // 50 loops in another process, 12 connections each: a stream until it expires, or a refusal.
  const statuses = await clientLoops(port, 50, 12)
  const connections = Object.values(statuses).reduce((sum, n) => sum + n, 0)
  await sleep(100)
  const stats = app.sse.stats()
  const tw = countTimeWait(port)
  t.equal(connections, 600)
  t.ok(stats.rejected > 100 && stats.expired > 50, `${stats.rejected} refused, ${stats.expired} expired`)
  t.ok(tw.client <= connections / 100, `client-side TIME_WAIT ${tw.client} of ${connections} connections (≤ 1%)`)
  t.ok(tw.server >= connections * 0.9, `server-side TIME_WAIT ${tw.server}: the server closed first`)
  t.comment(`${connections} connections: TIME_WAIT server ${tw.server}, client ${tw.client}`)
})

t.test('rejectWith "retry": a native EventSource waits and tries again instead of dying', async (t) => {
  const { app, port } = await startApp({ maxClients: 1, rejectWith: 'retry', retryAfterSeconds: 1, maxRetryAfterSeconds: 1, tarpitMs: 0 })
  t.teardown(() => app.close())
  const holder = await connect(port)
  const refused = await connect(port)
  await refused.ended
  t.equal(refused.status, 200, 'a refusal is a 200 event stream…')
  t.equal(refused.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(refused.retries.length, 1, '…a retry: …')
  t.same(refused.events.map((e) => [e.event, JSON.parse(e.data)]), [['refused', { reason: 'capacity', retryAfterSeconds: 1 }]],
    '…and one named event a native EventSource ignores, so the project\'s client can tell a refusal from an expiry')
  t.ok(refused.retries[0] >= 1000 && refused.retries[0] <= 2500, `…of ${refused.retries[0]} ms (Retry-After 1-2 s ± 0.5 s)`)
  t.equal(app.sse.stats().rejected, 1, 'counted as a refusal, not a connect')

  const source = new EventSource(`http://127.0.0.1:${port}/api/events`)
  t.teardown(() => source.close())
  let errors = 0
  let opened = false
  source.addEventListener('error', () => { errors++ })
  source.addEventListener('open', () => { opened = true })
  await waitFor('two refusals seen by the EventSource', () => errors >= 2 && app.sse.stats().rejected >= 3, 10_000)
  t.not(source.readyState, source.CLOSED, 'the EventSource has not given up')
  holder.destroy()
  await waitFor('the EventSource to be admitted once the slot frees', () => app.sse.size === 1 && opened, 10_000)
  t.pass(`admitted after ${errors} refusals`)
})

t.test('Retry-After is drawn from a window that widens during a storm and narrows when calm', async (t) => {
  const { app, port } = await startApp({
    maxClients: 1, retryAfterSeconds: 2, maxRetryAfterSeconds: 16, stormRefusalsPerSecond: 5, tarpitMs: 0
  })
  t.teardown(() => app.close())
  const holder = await connect(port)
  const refuse = async (): Promise<number> => {
    const c = await connect(port)
    await c.ended
    return Number(c.headers['retry-after'])
  }
  const calm = [await refuse(), await refuse(), await refuse()]
  t.ok(calm.every((s) => s >= 2 && s <= 4), `calm refusals draw from [2, 4]: ${calm.join(',')}`)

  // A storm: 40 refusals in each of three seconds.
  const seen: number[] = []
  for (let second = 0; second < 3; second++) {
    const started = Date.now()
    seen.push(...await Promise.all(Array.from({ length: 40 }, refuse)))
    await sleep(1000 - (Date.now() - started))
  }
  const late = seen.slice(-40)
  t.ok(Math.max(...late) > 4, `the window widened during the storm: up to ${Math.max(...late)} s`)
  t.ok(seen.every((s) => s >= 2 && s <= 16), 'never beyond maxRetryAfterSeconds')
  t.ok(new Set(late).size > 1, `refusals in one second get different delays: ${[...new Set(late)].join(',')}`)
  holder.destroy()
  await waitFor('slot free', () => app.sse.size === 0)
  const stormStream = await connect(port)
  await waitFor('retry frame', () => stormStream.retries.length === 1)
  t.ok(stormStream.retries[0] > 6000, `a stream opened during the storm gets a wider retry: (${stormStream.retries[0]} ms)`)
  stormStream.destroy()
  await waitFor('slot free', () => app.sse.size === 0)

  await sleep(4200)
  const afterCalm = await connect(port)
  await waitFor('retry frame', () => afterCalm.retries.length === 1)
  t.ok(afterCalm.retries[0] <= 6000, `calm again: retry: ${afterCalm.retries[0]} ms is back within 5000 ± 1000`)
  const again = await connect(port)
  await again.ended
  t.ok(Number(again.headers['retry-after']) <= 4, `and Retry-After back to [2, 4]: ${again.headers['retry-after']}`)
  afterCalm.destroy()
})

t.test('slow rejection: during a storm refusals are held, bounded in number', async (t) => {
  const { app, port } = await startApp({
    maxClients: 1, stormRefusalsPerSecond: 5, tarpitMs: 600, tarpitJitterMs: 200, maxHeldRefusals: 10
  })
  t.teardown(() => app.close())
  const holder = await connect(port)
  // Six quick refusals start the storm (answered at once: the sixth crosses the threshold).
  for (let i = 0; i < 5; i++) await (await connect(port)).ended
  const started = Date.now()
  const burst = await Promise.all(Array.from({ length: 30 }, async () => {
    const c = await connect(port)
    await c.ended
    return { ms: Date.now() - started, status: c.status }
  }))
  const held = burst.filter((r) => r.ms >= 350)
  const immediate = burst.filter((r) => r.ms < 350)
  t.ok(burst.every((r) => r.status === 503), 'all refused')
  t.equal(held.length, 10, `exactly maxHeldRefusals (10) were held; ${immediate.length} answered at once`)
  t.ok(held.every((r) => r.ms <= 800 + 300), `held for tarpitMs ± jitter: ${held.map((r) => r.ms).join(',')}`)
  t.equal(app.sse.stats().tarpitted, 10)

  // A held client that gives up, and shutdown with refusals held: nothing waits on them.
  const quitter = connect(port)
  const stillHeld = [connect(port), connect(port)]
  await sleep(50)
  ;(await quitter).destroy()
  const closedAt = Date.now()
  holder.destroy()
  await app.close()
  const answers = await Promise.all(stillHeld.map(async (p) => { const c = await p; await c.ended; return Date.now() - closedAt }))
  t.ok(answers.every((ms) => ms < 500), `held refusals answered at shutdown (${answers.join(',')} ms)`)
})

t.test('maxClientsPerKey: one runaway tool cannot take every slot (429 + Retry-After)', async (t) => {
  const { app, port } = await startApp({ maxClients: 10, maxClientsPerKey: 2, tarpitMs: 0 })
  t.teardown(() => app.close())
  const tool = { 'x-client-id': 'runaway-cli' }
  const a = await connect(port, '/api/events', tool)
  const b = await connect(port, '/api/events', tool)
  const c = await connect(port, '/api/events', tool)
  t.same([a.status, b.status, c.status], [200, 200, 429])
  await c.ended
  t.ok(Number(c.headers['retry-after']) >= 5)
  t.equal(JSON.parse(c.body).reason, 'perKey')
  t.match(JSON.parse(c.body).message, /this client already holds 2 event streams/)
  const other = await connect(port, '/api/events?clientId=editor')
  t.equal(other.status, 200, 'another client id is admitted')
  const anonymous = await connect(port)
  const anonymous2 = await connect(port)
  t.same([anonymous.status, anonymous2.status], [200, 200], 'unnamed clients count by address')
  const anonymous3 = await connect(port)
  t.equal(anonymous3.status, 429, 'and the address has its own limit')
  a.destroy()
  await waitFor('slot for the tool', () => app.sse.size === 4)
  const d = await connect(port, '/api/events', tool)
  t.equal(d.status, 200, 'a freed slot goes back to the tool')
  for (const s of [b, d, other, anonymous, anonymous2]) s.destroy()
})

t.test('connect-rate guard: a mass reconnect is admitted at the configured rate', async (t) => {
  const { app, port } = await startApp({ maxClients: 100, maxConnectsPerSecond: 10, connectBurst: 5, tarpitMs: 0 })
  t.teardown(() => app.close())
  const first = await Promise.all(Array.from({ length: 20 }, () => connect(port)))
  const admitted = first.filter((c) => c.status === 200)
  const limited = first.filter((c) => c.status === 503)
  t.ok(admitted.length >= 5 && admitted.length <= 7, `a burst of ${admitted.length} admitted (burst 5)`)
  await Promise.all(limited.map((c) => c.ended))
  t.ok(limited.every((c) => JSON.parse(c.body).reason === 'rate'), 'the rest refused for rate')
  await sleep(1000)
  const later = await Promise.all(Array.from({ length: 20 }, () => connect(port)))
  const refilled = later.filter((c) => c.status === 200).length
  t.ok(refilled >= 4 && refilled <= 7, `${refilled} more admitted a second later (10/s, burst 5)`)
  for (const c of [...first, ...later]) c.destroy()
})

t.test('staged drain: shutdown gives each client a jittered retry: and ends streams in batches', async (t) => {
  const { app, port } = await startApp({ maxClients: 200, drainMs: 500, retryMs: 5000, retryJitterMs: 1000 })
  const conns: SseConnection[] = await Promise.all(Array.from({ length: 200 }, () => connect(port)))
  await waitFor('200 streams', () => app.sse.size === 200)
  const endedAt = new Map<SseConnection, number>()
  for (const c of conns) void c.ended.then(() => endedAt.set(c, Date.now()))
  const started = Date.now()
  await app.close()
  const closeMs = Date.now() - started
  await waitFor('every stream to end', () => endedAt.size === 200)
  t.ok(closeMs < 500 + 400, `close() took ${closeMs} ms (drainMs 500)`)
  const offsets = [...endedAt.values()].map((ms) => ms - started)
  const spread = Math.max(...offsets) - Math.min(...offsets)
  t.ok(spread >= 300, `streams ended over ${spread} ms, not at once`)
  const drainRetries = conns.map((c) => c.retries[c.retries.length - 1])
  t.ok(conns.every((c) => c.retries.length === 2), 'each client got a second retry: before its stream ended')
  t.ok(drainRetries.every((ms) => ms >= 4000 && ms <= 6000), 'within retryMs ± retryJitterMs')
  // Where these clients would come back: end time + retry, bucketed by second.
  const returns = conns.map((c) => (endedAt.get(c) as number) - started + c.retries[1])
  const buckets = new Map<number, number>()
  for (const ms of returns) buckets.set(Math.floor(ms / 1000), (buckets.get(Math.floor(ms / 1000)) ?? 0) + 1)
  const span = (Math.max(...returns) - Math.min(...returns)) / 1000
  const busiest = Math.max(...buckets.values())
  t.ok(busiest <= 2 * (200 / span), `busiest second of reconnects ${busiest}, average ${(200 / span).toFixed(0)}/s over ${span.toFixed(1)} s`)
  t.equal(app.sse.stats().shutdown, 200)
})
