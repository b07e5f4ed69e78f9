import t, { type Test } from 'tap'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import towerSse, { type TowerSseOptions } from '../lib'
import { withTestClocks } from '../lib/testing'
import { connect, waitFor } from './fixtures/sse-connection'
import { MemoryLog } from '../lib/resumable/memory-log'
import type { PerRequestStream } from '../lib/route/per-request'

async function answerApp (t: Test, options: TowerSseOptions = {}): Promise<{ app: FastifyInstance, port: number, produced: string[], gate: { open: () => void } }> {
  const produced: string[] = []
  let opened!: () => void
  const gateOpen = new Promise<void>((resolve) => { opened = resolve })
  const app = Fastify({ logger: false })
  await app.register(towerSse, withTestClocks({ path: false, heartbeatMs: 60_000, keyFn: (req) => String(req.headers['x-user'] ?? 'anon'), ...options }, { random: () => 0.5 }))
  app.post('/answer', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
    resumable: true,
    stream: ({ id }) => (async function * () {
      produced.push(id)
      for (let n = 0; n < 5; n++) yield { data: `token ${n}` }
      await gateOpen
      for (let n = 5; n < 10; n++) yield { data: `token ${n}` }
    })()
  }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { app, port: (app.server.address() as AddressInfo).port, produced, gate: { open: opened } }
}

t.test('memory: an answer resumed after a cut gets the rest once, in order, without running the producer again; then 204', async (t) => {
  const { port, produced, gate } = await answerApp(t)
  const first = await connect(port, '/answer', { 'x-user': 'alice' }, { method: 'POST' })
  await waitFor('5 tokens', () => first.events.length === 5)
  const last = first.events[4].id as string
  first.destroy()
  gate.open()
  const resumed = await connect(port, '/answer', { 'x-user': 'alice', 'last-event-id': last }, { method: 'POST' })
  await resumed.ended
  t.same(resumed.events.map((e) => e.event ?? e.data), ['token 5', 'token 6', 'token 7', 'token 8', 'token 9', 'end'])
  t.equal(produced.length, 1, 'the factory ran once')
  const after = await connect(port, '/answer', { 'x-user': 'alice', 'last-event-id': resumed.events.at(-1)?.id as string }, { method: 'POST' })
  await after.ended
  t.equal(after.status, 204)
  const stranger = await connect(port, '/answer', { 'x-user': 'mallory', 'last-event-id': last }, { method: 'POST' })
  await stranger.ended
  t.equal(stranger.status, 404)
})

t.test('a producer that is always ready lets the event loop turn while it runs: a timer set as it starts fires before it ends', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(towerSse, withTestClocks({ path: false, heartbeatMs: 60_000 }, { random: () => 0.5 }))
  const TOTAL = 3000
  let pulled = 0
  let pulledWhenTimerFired = -1
  app.post('/canned', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
    resumable: true,
    stream: () => (async function * () {
      // Every event ready at once, as a buffered cursor's: nothing here waits on I/O.
      setImmediate(() => { pulledWhenTimerFired = pulled })
      for (; pulled < TOTAL; pulled++) yield { data: `row ${pulled}` }
    })()
  }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const reader = await connect((app.server.address() as AddressInfo).port, '/canned', {}, { method: 'POST' })
  await reader.ended
  t.equal(reader.events.filter((e) => e.event === undefined).length, TOTAL, 'every event delivered')
  t.ok(pulledWhenTimerFired >= 0 && pulledWhenTimerFired < TOTAL, `the loop turned with ${pulledWhenTimerFired} of ${TOTAL} pulled`)
})

// The log's `record` (tower-sse/mcp's append): no producer, no end, kept ttlMs past its last event.

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

t.test('memory log: record creates the log for its owner, appends in order, refuses another owner and a cancelled log', async (t) => {
  const log = new MemoryLog()
  t.teardown(() => log.close())
  const changed: string[] = []
  log.watch((id, ended) => changed.push(`${id ?? '*'}${ended ? ' ended' : ''}`))
  t.equal(await log.record('m1', 'alice', 60_000, 'stream-1', [{ data: 'a' }]), 1)
  t.equal(await log.record('m1', 'alice', 60_000, 'ignored', [{ data: 'b' }, { data: 'c' }]), 3)
  const read = await log.read('m1', 0, 10)
  t.same(read?.meta, { owner: 'alice', running: true, last: 3, label: 'stream-1' }, 'created once, labelled by its first record')
  t.same(read?.entries.map((e) => e.kind === 'event' ? e.event.data : e.kind), ['a', 'b', 'c'])
  t.equal(await log.record('m1', 'mallory', 60_000, 'stream-1', [{ data: 'x' }]), null, 'another owner\'s log takes nothing')
  t.equal(await log.finish('m1', { kind: 'cancelled' }), true)
  t.equal(await log.record('m1', 'alice', 60_000, 'stream-1', [{ data: 'd' }]), null, 'a cancelled log takes nothing')
  t.same((await log.read('m1', 0, 10))?.entries.map((e) => e.kind), ['event', 'event', 'event', 'end'])
  await sleep(0)
  t.same(changed, ['m1', 'm1', 'm1 ended'], 'each record and the end are told, the end as one')
})

t.test('memory log: a recorded log expires ttlMs after its last record, not its first', async (t) => {
  const log = new MemoryLog()
  t.teardown(() => log.close())
  await log.record('m2', 'alice', 400, 's', [{ data: 'a' }])
  await sleep(250)
  await log.record('m2', 'alice', 400, 's', [{ data: 'b' }])
  // Timers fire in the order they are due: this one (500 ms after the first record) before the
  // log's (650 ms), whatever the machine's load.
  await sleep(250)
  t.equal((await log.read('m2', 0, 10))?.meta.last, 2, 'kept past ttlMs after its first record')
  await sleep(400)
  t.equal(await log.read('m2', 0, 10), null, 'gone ttlMs after its last')
})

// What a request for a resumable answer is told, and what becomes of the iterable it brought.

interface Answers {
  app: FastifyInstance
  port: number
  /** Per producer started (by stream id): its signal, and whether its iterator was returned. */
  producers: Map<string, { signal: AbortSignal, returned: boolean }>
  /** Names of the plain iterables (POST /tracked) returned unstarted, and of those started. */
  released: string[]
  started: string[]
  /** Requests of POST /race waiting in their key hook; `go()` lets them all on at once. */
  arrived: () => number
  go: () => void
}

async function answers (t: Test): Promise<Answers> {
  const producers: Answers['producers'] = new Map()
  const released: string[] = []
  const started: string[] = []
  let arrived = 0
  let go!: () => void
  const gate = new Promise<void>((resolve) => { go = resolve })
  const app = Fastify({ logger: false })
  await app.register(towerSse, withTestClocks({ path: false, heartbeatMs: 60_000, keyFn: (req) => String(req.headers['x-user'] ?? 'anon') }, { random: () => 0.5 }))
  const resumable = (headers: Record<string, unknown>): { id?: string, ttlMs?: number } => ({
    ...(typeof headers['x-id'] === 'string' ? { id: headers['x-id'] } : {}),
    ...(typeof headers['x-ttl'] === 'string' ? { ttlMs: Number(headers['x-ttl']) } : {})
  })
  /** `x-tokens` tokens, then: the end, a throw (`x-then: throw`) or a wait for ever (`x-then: wait`). */
  const answer = (headers: Record<string, unknown>) => ({ id, signal }: { id: string, signal: AbortSignal }): PerRequestStream => {
    const produced = { signal, returned: false }
    producers.set(id, produced)
    const tokens = Number(headers['x-tokens'] ?? 3)
    let n = 0
    return {
      [Symbol.asyncIterator]: () => ({
        next: async () => {
          if (n < tokens) return { done: false, value: { data: `${String(headers['x-user'])} ${n++}` } }
          if (headers['x-then'] === 'throw') throw new Error('the model went away')
          if (headers['x-then'] === 'wait') return await new Promise<never>(() => {})
          return { done: true, value: undefined }
        },
        return: async () => {
          produced.returned = true
          return { done: true, value: undefined }
        }
      })
    }
  }
  app.post('/answer', { eventStream: true }, (request, reply) => reply.eventStream.subscribe({ resumable: resumable(request.headers), stream: answer(request.headers) }))
  app.post('/race', {
    eventStream: {
      keyFn: async (request) => {
        arrived++
        await gate
        return String(request.headers['x-user'])
      }
    }
  }, (request, reply) => reply.eventStream.subscribe({ resumable: resumable(request.headers), stream: answer(request.headers) }))
  app.post('/tracked', { eventStream: true }, (request, reply) => {
    const name = String(request.headers['x-name'])
    let done = false
    return reply.eventStream.subscribe({
      resumable: resumable(request.headers),
      stream: {
        [Symbol.asyncIterator]: () => ({
          next: async () => {
            if (!started.includes(name)) started.push(name)
            if (done) return { done: true, value: undefined }
            done = true
            return { done: false, value: { data: name } }
          },
          return: async () => {
            if (!started.includes(name)) released.push(name)
            return { done: true, value: undefined }
          }
        })
      }
    })
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { app, port: (app.server.address() as AddressInfo).port, producers, released, started, arrived: () => arrived, go }
}

const post = (port: number, path: string, headers: Record<string, string>): ReturnType<typeof connect> => connect(port, path, headers, { method: 'POST' })

/** The id `id` with its seal replaced by one that was never made. */
const forged = (id: string): string => id.replace(/\.[^.]+$/, '.AAAAAAAAAAAAAAAA')

t.test('an id checks only with its own seal, for its own owner: a forged seal, a forged end and another key\'s end all find nothing (404)', async (t) => {
  const { port } = await answers(t)
  const first = await post(port, '/answer', { 'x-user': 'alice' })
  await first.ended
  const ids = first.events.map((e) => e.id as string)
  t.same(first.events.map((e) => e.event ?? e.data), ['alice 0', 'alice 1', 'alice 2', 'end'])
  const endId = ids.at(-1) as string
  t.match(endId, /^r\.[\w-]+\.end\.[\w-]{16}$/)
  const asked = [
    ['alice', ids[0], 'her own id: the rest'],
    ['alice', forged(ids[0]), 'her stream\'s id with a forged seal'],
    ['alice', forged(endId), 'her stream\'s end with a forged seal'],
    ['mallory', endId, 'her end, asked by another key'],
    ['alice', endId, 'her own end']
  ]
  const statuses: number[] = []
  for (const [user, id] of asked) {
    const c = await post(port, '/answer', { 'x-user': user, 'last-event-id': id })
    await c.ended
    statuses.push(c.status)
  }
  t.same(statuses, [200, 404, 404, 404, 204], asked.map(([, , why]) => why).join('; '))
})

t.test('what a request brought and does not need is released, never started: a resume that attaches, an end already had (204), another key\'s (404)', async (t) => {
  const { port, released, started } = await answers(t)
  const first = await post(port, '/tracked', { 'x-user': 'alice', 'x-id': 'msg-1', 'x-name': 'first' })
  await first.ended
  t.same(first.events.map((e) => e.event ?? e.data), ['first', 'end'])
  const attached = await post(port, '/tracked', { 'x-user': 'alice', 'x-id': 'msg-1', 'x-name': 'attached' })
  await attached.ended
  t.same(attached.events.map((e) => e.event ?? e.data), ['first', 'end'], 'the app\'s id again: the answer there is, from its start')
  const done = await post(port, '/tracked', { 'x-user': 'alice', 'x-name': 'done', 'last-event-id': first.events[1].id as string })
  await done.ended
  const stranger = await post(port, '/tracked', { 'x-user': 'mallory', 'x-id': 'msg-1', 'x-name': 'stranger' })
  await stranger.ended
  t.same([done.status, stranger.status], [204, 404])
  await waitFor('every iterable not needed released', () => released.length === 3)
  t.same(released, ['attached', 'done', 'stranger'])
  t.same(started, ['first'], 'only the producer was pulled')
})

t.test('an app\'s id whose log expired and was made again by another key: the first owner\'s old ids find nothing there', async (t) => {
  const { port } = await answers(t)
  const alice = await post(port, '/answer', { 'x-user': 'alice', 'x-id': 'reused', 'x-ttl': '20' })
  await alice.ended
  // The log's expiry (20 ms after its end) is due before this wait's end.
  await sleep(100)
  const mallory = await post(port, '/answer', { 'x-user': 'mallory', 'x-id': 'reused', 'x-then': 'wait' })
  await waitFor('mallory\'s answer', () => mallory.events.length === 3)
  const old = await post(port, '/answer', { 'x-user': 'alice', 'last-event-id': alice.events[0].id as string })
  await old.ended
  t.equal(old.status, 404, 'not alice\'s answer any more: nothing of mallory\'s is sent to her')
  mallory.destroy()
})

t.test('two keys asking for one app id at once: one produces, the other is told not found, never given the answer', async (t) => {
  const { port, arrived, go, producers } = await answers(t)
  const alice = post(port, '/race', { 'x-user': 'alice', 'x-id': 'same', 'x-then': 'wait' })
  const mallory = post(port, '/race', { 'x-user': 'mallory', 'x-id': 'same', 'x-then': 'wait' })
  await waitFor('both in their key hook', () => arrived() === 2)
  go()
  const [a, m] = await Promise.all([alice, mallory])
  await m.ended
  t.same(m.events.map((e) => [e.event, e.data]), [['error', '{"code":"TOWER_SSE_STREAM_NOT_FOUND"}']], 'the second to create it is told, and gets nothing of the answer')
  await waitFor('alice\'s answer', () => a.events.length === 3)
  t.same(a.events.map((e) => e.data), ['alice 0', 'alice 1', 'alice 2'])
  t.equal(producers.size, 1, 'one producer')
  a.destroy()
})

t.test('cancel: the producer is aborted and its iterator returned (a cursor, a model call let go); its followers get the end; a producer that fails is counted as failed', async (t) => {
  const { app, port, producers } = await answers(t)
  const c = await post(port, '/answer', { 'x-user': 'alice', 'x-id': 'long', 'x-then': 'wait' })
  await waitFor('its tokens', () => c.events.length === 3)
  t.equal(await app.sse.cancel('long'), true)
  await c.ended
  t.same([c.events.at(-1)?.event, c.events.at(-1)?.data], ['end', '{"reason":"cancelled"}'])
  const producer = producers.get('long')
  await waitFor('the producer\'s iterator returned', () => producer?.returned === true)
  t.equal(producer?.signal.reason, 'cancelled')
  t.equal(await app.sse.cancel('long'), false, 'once')
  t.match(app.sse.stats(), { ended: 1, streamFailed: 0 })

  const failing = await post(port, '/answer', { 'x-user': 'alice', 'x-then': 'throw' })
  await failing.ended
  t.same(failing.events.map((e) => e.event ?? e.data), ['alice 0', 'alice 1', 'alice 2', 'error'])
  t.match(app.sse.stats(), { ended: 1, streamFailed: 1 }, 'its follower counted as a failed stream')
})

t.test('memory log: one create per id, one end, appends after the end refused, a read after n starts at n + 1, an ended log expires ttlMs after its end', async (t) => {
  const log = new MemoryLog()
  t.teardown(() => log.close())
  t.same(await log.create('a', 'alice', 50), { created: true })
  t.equal(await log.append('a', [{ data: '1' }, { data: '2' }, { data: '3', event: 'note', retry: 500 }]), 3)
  t.same(await log.create('a', 'mallory', 50), { created: false, meta: { owner: 'alice', running: true, last: 3, label: undefined } }, 'made once: its meta is what a second create gets')
  const after1 = await log.read('a', 1, 10)
  t.same(after1?.entries.map((e) => e.seq), [2, 3], 'after 1: from 2')
  t.same((await log.read('a', 1, 1))?.entries.map((e) => e.seq), [2], 'at most the limit')
  t.equal(await log.finish('a', { kind: 'done' }), true)
  t.equal(await log.finish('a', { kind: 'cancelled' }), false, 'ended once')
  t.equal(await log.append('a', [{ data: '4' }]), null, 'nothing after the end')
  const read = await log.read('a', 0, 10)
  t.same(read?.entries.map((e) => e.kind === 'end' ? `end ${e.outcome.kind}` : e.event.data), ['1', '2', '3', 'end done'])
  t.same(read?.meta, { owner: 'alice', running: false, last: 4, label: undefined })
  let gone = false
  await waitFor('the ended log to expire', () => {
    void log.read('a', 0, 0).then((found) => { gone = found === null })
    return gone
  })
})
