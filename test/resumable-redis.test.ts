import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import path from 'node:path'
import { once } from 'node:events'
import { server } from './fixtures/bus-instances'
import { startAnswerApp, type AnswerApp } from './fixtures/answer-app'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'
import { LIVENESS_MS, HEARTBEAT_MS } from '../lib/resumable/resumables'
import { RedisLog } from '../lib/resumable/redis-log'
import { Redis } from 'ioredis'

// A resumable answer on the Redis bus, two instances (and a producer in a process of its own):
// resumed anywhere, once and in order, the producer never run twice; its death told; its end an end.

const root = path.join(__dirname, '..')

async function pair (t: Test, key: string, answer: Parameters<typeof startAnswerApp>[1] = {}): Promise<[AnswerApp, AnswerApp]> {
  const redis = await server(t)
  const a = await startAnswerApp({ redis: { url: redis.url, key } }, answer)
  t.teardown(() => a.app.close())
  const b = await startAnswerApp({ redis: { url: redis.url, key } }, answer)
  t.teardown(() => b.app.close())
  return [a, b]
}

/** The answer asked for again: the same body every time (a resume sends it too; it changes nothing). */
function post (port: number, headers: Record<string, string>): Promise<SseConnection> {
  return connect(port, '/answer', { 'content-type': 'application/json', ...headers }, { method: 'POST', body: '{"question":"again"}' })
}

const tokens = (c: SseConnection): string[] => c.events.map((e) => e.event === undefined ? e.data : `${e.event} ${e.data}`)

t.test('cut on A, resumed on B: every event once, in order, then the end; the factory ran once; then 204', async (t) => {
  let release!: () => void
  const [a, b] = await pair(t, 'resume', { tokens: 40, holdAfter: 5, hold: new Promise((resolve) => { release = resolve }) })
  const first = await post(a.port, { 'x-user': 'alice' })
  await waitFor('5 tokens on A', () => first.events.length === 5)
  first.destroy()
  release()
  const seen = first.events.length
  const resumed = await post(b.port, { 'x-user': 'alice', 'last-event-id': first.events[seen - 1].id as string })
  await resumed.ended
  const all = [...tokens(first), ...tokens(resumed)]
  t.same(all, [...Array.from({ length: 40 }, (_, n) => `token ${n}`), 'end {}'], 'every token once, in order, then `end`')
  t.same([a.produced.length, b.produced.length], [1, 0], 'the factory ran on A only, once')
  const ids = resumed.events.map((e) => e.id as string)
  t.ok(ids.every((id) => id.startsWith('r.')), 'resumable ids')
  const done = await post(b.port, { 'x-user': 'alice', 'last-event-id': ids.at(-1) as string })
  await done.ended
  t.equal(done.status, 204, 'at the end: 204, so EventSource stops')
  const again = await post(a.port, { 'x-user': 'alice', 'last-event-id': ids[10] })
  await again.ended
  t.same(tokens(again), [...Array.from({ length: 40 - seen - 11 }, (_, n) => `token ${seen + 11 + n}`), 'end {}'], 'a resume from the middle, after the end, on A again')
})

t.test('another key\'s resume, and a forged id, answer 404 alike; no stream opens', async (t) => {
  const [a, b] = await pair(t, 'owner', { tokens: 3 })
  const mine = await post(a.port, { 'x-user': 'alice' })
  await mine.ended
  const id = mine.events[0].id as string
  const theirs = await post(b.port, { 'x-user': 'mallory', 'last-event-id': id })
  await theirs.ended
  const forged = await post(b.port, { 'x-user': 'mallory', 'last-event-id': id.replace(/\.[^.]+$/, '.AAAAAAAAAAAAAAAA') })
  await forged.ended
  t.same([theirs.status, forged.status], [404, 404])
  t.same(JSON.parse(theirs.body), JSON.parse(forged.body), 'the same answer: existence is not revealed')
  t.match(JSON.parse(theirs.body), { code: 'TOWER_SSE_STREAM_NOT_FOUND' })
  t.equal(b.app.sse.stats().accepted, 0, 'no stream opened')
  // The app's own id, asked by another key: not theirs to attach to either.
  const named = await post(a.port, { 'x-user': 'alice', 'x-id': 'msg-1' })
  await named.ended
  const stolen = await post(b.port, { 'x-user': 'mallory', 'x-id': 'msg-1' })
  await stolen.ended
  t.equal(stolen.status, 404)
  t.same(b.produced, [], 'nothing produced for mallory')
})

t.test('cancel from the other instance aborts the producer where it runs and ends every follower', async (t) => {
  const [a, b] = await pair(t, 'cancel', { tokens: 1000, everyMs: 10 })
  const onA = await post(a.port, { 'x-user': 'alice', 'x-id': 'long' })
  await waitFor('a token', () => onA.events.length >= 1)
  const onB = await post(b.port, { 'x-user': 'alice', 'last-event-id': onA.events[0].id as string })
  await waitFor('B following', () => onB.events.length >= 1)
  t.equal(await b.app.sse.cancel('long'), true)
  await Promise.all([onA.ended, onB.ended])
  await waitFor('the producer aborted on A', () => a.aborted.has('long'))
  t.equal(a.aborted.get('long'), 'cancelled')
  t.same([onA.events.at(-1)?.event, onB.events.at(-1)?.event, onB.events.at(-1)?.data], ['end', 'end', '{"reason":"cancelled"}'])
  t.equal(await b.app.sse.cancel('long'), false, 'once')
})

t.test('a producer SIGKILLed mid-answer: its followers elsewhere are told within the liveness deadline, and the log still resumes', async (t) => {
  const redis = await server(t)
  const child = spawn(process.execPath, ['--import', path.join(root, 'scripts', 'typescript-hooks.mjs'), path.join(__dirname, 'fixtures', 'answer-main.ts'), redis.url, 'killed', '20'], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  const [line] = await once(child.stdout, 'data') as [Buffer]
  const producerPort = Number(line.toString().trim())
  const b = await startAnswerApp({ redis: { url: redis.url, key: 'killed' } })
  t.teardown(() => b.app.close())
  const onProducer = await post(producerPort, { 'x-user': 'alice' })
  await waitFor('tokens', () => onProducer.events.length >= 3)
  const onB = await post(b.port, { 'x-user': 'alice', 'last-event-id': onProducer.events[0].id as string })
  await waitFor('B following', () => onB.events.length >= 3)
  child.kill('SIGKILL')
  const killedAt = Date.now()
  await onB.ended
  const toldAfter = Date.now() - killedAt
  const last = onB.events.at(-1)
  t.same([last?.event, last?.data], ['error', '{"code":"TOWER_SSE_PRODUCER_LOST"}'], 'told: the producer is gone')
  t.ok(toldAfter < LIVENESS_MS + 3 * HEARTBEAT_MS + 5000, `told ${toldAfter} ms after the kill (deadline ${LIVENESS_MS + HEARTBEAT_MS} ms, with slack for a busy machine)`)
  const written = onB.events.filter((e) => e.event === undefined).length + 1
  const resumed = await post(b.port, { 'x-user': 'alice', 'last-event-id': onProducer.events[0].id as string })
  await resumed.ended
  t.equal(resumed.events.filter((e) => e.event === undefined).length, written - 1, 'the log kept what was written')
  t.equal(resumed.events.at(-1)?.event, 'error')
  t.same(b.produced, [], 'the factory was not run again elsewhere')
})

t.test('after the ttl: a resync, then the end with the end\'s id; a reconnect with it is answered 204', async (t) => {
  const [a, b] = await pair(t, 'ttl', { tokens: 3, ttlMs: 200 })
  const first = await post(a.port, { 'x-user': 'alice' })
  await first.ended
  await new Promise((resolve) => setTimeout(resolve, 600))
  const late = await post(b.port, { 'x-user': 'alice', 'last-event-id': first.events[0].id as string })
  await late.ended
  t.equal(late.status, 200, late.body)
  t.same(late.events.map((e) => [e.event, JSON.parse(e.data).reason]), [['resync', 'expired'], ['end', 'expired']], 'missed events may be gone: told, and nothing more comes')
  t.equal(late.events[1].id, first.events.at(-1)?.id, 'the end\'s id')
  const next = await post(b.port, { 'x-user': 'alice', 'last-event-id': late.events[1].id as string })
  await next.ended
  t.equal(next.status, 204)
})

t.test('the log out of reach (Redis stopped): a resume is refused 503 + Retry-After, a new answer closes with a retry; neither runs the factory, both are answered once it is back', async (t) => {
  const redis = await server(t)
  const a = await startAnswerApp({ redis: { url: redis.url, key: 'reach' } }, { tokens: 3 })
  t.teardown(() => a.app.close())
  const first = await post(a.port, { 'x-user': 'alice' })
  await first.ended
  t.equal(first.events.at(-1)?.event, 'end')

  redis.pause()
  // Both asked at once, before the bus could be judged deaf (its refusals come first then).
  const [resumed, fresh, plain] = await Promise.all([
    post(a.port, { 'x-user': 'alice', 'last-event-id': first.events[0].id as string }),
    post(a.port, { 'x-user': 'alice' }),
    post(a.port, { 'x-user': 'alice', 'last-event-id': first.events[0].id as string, 'x-plain': '1', 'x-name': 'plain' })
  ])
  await Promise.all([resumed.ended, fresh.ended, plain.ended])
  t.equal(resumed.status, 503, resumed.body)
  t.equal(plain.status, 503)
  await waitFor('the iterable the refused resume brought to be released', () => a.released.includes('plain'))
  t.ok(Number(resumed.headers['retry-after']) >= 1, 'told when to come back')
  t.equal(JSON.parse(resumed.body).code, 'TOWER_SSE_LOG_UNAVAILABLE')
  t.equal(fresh.status, 200)
  t.same(fresh.events, [], 'no event: nothing was produced, and no error that would stop a client for good')
  t.equal(fresh.retries.length, 2, 'the retry: it opened with, and a fresh one as it closed')
  t.same(a.produced.length, 1, 'the factory ran for the first answer only')
  redis.resume()

  // Its connection torn down by the command deadline, the app reconnects: refused until then.
  let again!: SseConnection
  await until('a resume answered', async () => {
    again = await post(a.port, { 'x-user': 'alice', 'last-event-id': first.events[0].id as string })
    await again.ended
    return again.status === 200
  })
  t.same(tokens(again), ['token 1', 'token 2', 'end {}'], 'resumed after its id once Redis answers again')
})

// The log's `record` (tower-sse/mcp's append), on two instances' logs (two origins) over one Redis.

/** Waits until `condition` resolves true (checked every 20 ms), failing after `timeoutMs`. */
async function until (what: string, condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!await condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

async function twoLogs (t: Test, key: string): Promise<{ a: RedisLog, b: RedisLog, raw: Redis }> {
  const redis = await server(t)
  const connections = [new Redis(redis.url), new Redis(redis.url), new Redis(redis.url)]
  t.teardown(() => { for (const c of connections) c.disconnect() })
  const [a, b] = [new RedisLog(connections[0], key), new RedisLog(connections[1], key)]
  t.teardown(async () => { await a.close(); await b.close() })
  return { a, b, raw: connections[2] }
}

t.test('redis log: record appends from any instance, in one sequence; append stays its producer\'s alone', async (t) => {
  const { a, b } = await twoLogs(t, 'record')
  const heard: string[] = []
  b.watch((id, ended) => heard.push(`${id ?? '*'}${ended ? ' ended' : ''}`))
  // B hears once it has used its log (a first read starts its listener).
  await b.read('warm', 0, 0)
  await until('B listening', async () => (await a.record('warm', 'alice', 60_000, 'w', [{ data: 'w' }])) !== null && heard.includes('warm'))
  const seqs = (await Promise.all([
    a.record('m1', 'alice', 60_000, 'stream-1', [{ data: 'a1' }]),
    b.record('m1', 'alice', 60_000, 'stream-1', [{ data: 'b1' }, { data: 'b2' }]),
    a.record('m1', 'alice', 60_000, 'stream-1', [{ data: 'a2' }])
  ])).map((seq) => seq ?? NaN)
  const read = await b.read('m1', 0, 10)
  const order = read?.entries.map((e) => e.kind === 'event' ? e.event.data : e.kind) ?? []
  t.same([...order].sort(), ['a1', 'a2', 'b1', 'b2'], 'every event once, in one sequence across both instances')
  t.same([order[seqs[0] - 1], order[seqs[1] - 2], order[seqs[1] - 1], order[seqs[2] - 1]], ['a1', 'b1', 'b2', 'a2'], 'each record resolves with its last event\'s place; a batch stays together')
  t.ok(seqs[0] < seqs[2], 'one instance\'s records in the order it made them')
  t.same(read?.meta, { owner: 'alice', running: true, last: 4, label: 'stream-1' })
  t.equal(await b.record('m1', 'mallory', 60_000, 'stream-1', [{ data: 'x' }]), null, 'another owner\'s log takes nothing')
  // The producer's append, by contrast: only on the instance that created the log.
  t.same(await a.create('answer', 'alice', 60_000), { created: true })
  t.equal(await b.append('answer', [{ data: 'x' }]), null, 'append refuses another instance')
  t.equal(await a.append('answer', [{ data: 'x' }]), 1)
  t.equal(await b.finish('m1', { kind: 'cancelled' }), true)
  t.equal(await a.record('m1', 'alice', 60_000, 'stream-1', [{ data: 'late' }]), null, 'a cancelled log takes nothing')
  await waitFor('each record and the end told on B', () => heard.filter((id) => id.startsWith('m1')).length === 4)
  t.same(heard.filter((id) => id.startsWith('m1')), ['m1', 'm1', 'm1', 'm1 ended'], 'the end told as one, the records not')
})

t.test('redis log: one create per id, one end, nothing appended after it, a read after n starts at n + 1, an ended log kept its ttlMs', async (t) => {
  const { a, b, raw } = await twoLogs(t, 'contract')
  t.same(await a.create('x', 'alice', 60_000), { created: true })
  t.equal(await a.append('x', [{ data: '1' }, { data: '2' }, { data: '3', event: 'note', retry: 500 }]), 3)
  t.same(await b.create('x', 'mallory', 60_000), { created: false, meta: { owner: 'alice', running: true, last: 3, label: undefined } }, 'made once: its meta is what a second create gets')
  t.same((await b.read('x', 1, 10))?.entries, [
    { seq: 2, kind: 'event', event: { data: '2' } },
    { seq: 3, kind: 'event', event: { data: '3', event: 'note', retry: 500 } }
  ], 'after 1: from 2, with each event\'s name and retry')
  t.same((await b.read('x', 1, 1))?.entries.map((e) => e.seq), [2], 'at most the limit')
  t.ok(await raw.pttl('{contract:r:x}:meta') > 60_000, 'running: kept its ttl and a slack past its producer\'s last sign of life')
  t.equal(await b.finish('x', { kind: 'cancelled' }), true)
  t.equal(await a.finish('x', { kind: 'done' }), false, 'ended once')
  t.equal(await a.append('x', [{ data: '4' }]), null, 'nothing after the end, not even its producer\'s')
  const read = await b.read('x', 0, 10)
  t.same(read?.entries.map((e) => e.kind === 'end' ? `end ${e.outcome.kind}` : e.event.data), ['1', '2', '3', 'end cancelled'])
  t.same(read?.meta, { owner: 'alice', running: false, last: 4, label: undefined })
  const kept = await Promise.all([raw.pttl('{contract:r:x}:meta'), raw.pttl('{contract:r:x}:log')])
  t.ok(kept.every((ms) => ms > 0 && ms <= 60_000), `ended: both keys kept its ttlMs from the end (${kept.join(', ')} ms)`)
})

t.test('redis log: a producer\'s heartbeat is its sign of life; only a producer silent past the deadline is reaped', async (t) => {
  const { a, b, raw } = await twoLogs(t, 'alive')
  const redisNow = async (): Promise<number> => {
    const [seconds, micros] = await raw.time()
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
  }
  const lastSign = async (): Promise<number> => Number(await raw.hget('{alive:r:y}:meta', 'h'))
  t.same(await a.create('y', 'alice', 60_000), { created: true })
  const created = await lastSign()
  await until('Redis\'s clock past the creation', async () => await redisNow() > created)
  await a.heartbeat(['y'])
  t.ok(await lastSign() > created, 'the heartbeat is the new sign of life')
  await b.reap(['y'], 60_000)
  t.equal((await b.read('y', 0, 0))?.meta.running, true, 'alive within the deadline: not reaped')
  const beat = await lastSign()
  await until('Redis\'s clock past the heartbeat', async () => await redisNow() > beat)
  await b.reap(['y'], 0)
  const read = await b.read('y', 0, 10)
  t.same(read?.entries, [{ seq: 1, kind: 'end', outcome: { kind: 'error', code: 'TOWER_SSE_PRODUCER_LOST' } }], 'silent past it: ended as lost')
})

t.test('a quiet producer proves itself alive: its log\'s sign of life moves on while it appends nothing', async (t) => {
  const redis = await server(t)
  const raw = new Redis(redis.url)
  t.teardown(() => raw.disconnect())
  const a = await startAnswerApp({ redis: { url: redis.url, key: 'quiet' } }, { tokens: 5, holdAfter: 2, hold: new Promise(() => {}) })
  t.teardown(() => a.app.close())
  const c = await post(a.port, { 'x-user': 'alice', 'x-id': 'thinking' })
  await waitFor('its tokens', () => c.events.length === 2)
  const meta = '{quiet:r:thinking}:meta'
  const [n, h] = await raw.hmget(meta, 'n', 'h')
  await until('a heartbeat', async () => Number(await raw.hget(meta, 'h')) > Number(h))
  t.equal(await raw.hget(meta, 'n'), n, 'nothing appended meanwhile')
  c.destroy()
})

t.test('redis log: a recorded log is kept ttlMs past its last record (no running slack), then gone', async (t) => {
  const { a, b, raw } = await twoLogs(t, 'record-ttl')
  await a.record('m2', 'alice', 60_000, 's', [{ data: 'a' }])
  await new Promise((resolve) => setTimeout(resolve, 1500))
  await b.record('m2', 'alice', 60_000, 's', [{ data: 'b' }])
  const [meta, log] = await Promise.all([raw.pttl('{record-ttl:r:m2}:meta'), raw.pttl('{record-ttl:r:m2}:log')])
  t.ok(meta > 58_500 && meta <= 60_000, `the state: ${meta} ms left, renewed by the last record`)
  t.ok(log > 58_500 && log <= 60_000, `the entries: ${log} ms left, renewed by the last record`)
  await a.record('m3', 'alice', 300, 's', [{ data: 'a' }])
  await until('the log to expire', async () => (await b.read('m3', 0, 1)) === null)
  t.same(await raw.exists('{record-ttl:r:m3}:meta', '{record-ttl:r:m3}:log'), 0, 'both keys')
})

t.test('the log is reached on first use: an app that never opens a resumable stream holds only the bus\'s two connections', async (t) => {
  const redis = await server(t)
  const raw = new Redis(redis.url)
  t.teardown(() => raw.disconnect())
  // Every client but this one (CLIENT LIST lists the caller too).
  const others = async (): Promise<number> => (await raw.client('LIST') as string).trim().split('\n').length - 1
  const a = await startAnswerApp({ redis: { url: redis.url, key: 'lazy' } }, { tokens: 2 })
  t.teardown(() => a.app.close())
  t.equal(await others(), 2, 'the bus\'s publisher and reader, no connection for a log nobody used')
  const answer = await post(a.port, { 'x-user': 'alice' })
  await answer.ended
  t.same(tokens(answer), ['token 0', 'token 1', 'end {}'], 'the first answer is served as any')
  t.equal(await others(), 4, 'then the log\'s own two beside them: its commands and its change notices (a subscriber)')
})
