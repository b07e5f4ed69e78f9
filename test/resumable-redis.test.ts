import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import path from 'node:path'
import { once } from 'node:events'
import { server } from './fixtures/bus-instances'
import { startAnswerApp, type AnswerApp } from './fixtures/answer-app'
import { connect, waitFor, type SseConnection } from './fixtures/sse-connection'
import { LIVENESS_MS, HEARTBEAT_MS } from '../lib/resumable/resumables'

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

t.test('after the ttl: a resync carrying the end\'s id, then 204', async (t) => {
  const [a, b] = await pair(t, 'ttl', { tokens: 3, ttlMs: 200 })
  const first = await post(a.port, { 'x-user': 'alice' })
  await first.ended
  await new Promise((resolve) => setTimeout(resolve, 600))
  const late = await post(b.port, { 'x-user': 'alice', 'last-event-id': first.events[0].id as string })
  await late.ended
  t.equal(late.status, 200, late.body)
  t.same(late.events.map((e) => [e.event, JSON.parse(e.data).reason]), [['resync', 'expired']], 'missed events may be gone: told')
  const next = await post(b.port, { 'x-user': 'alice', 'last-event-id': late.events[0].id as string })
  await next.ended
  t.equal(next.status, 204)
})
