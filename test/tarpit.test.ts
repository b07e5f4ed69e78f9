import { EventEmitter } from 'node:events'
import t from 'tap'
import type { FastifyReply } from 'fastify'
import { Tarpit } from '../lib/admission/tarpit'
import { MAX_HELD_REFUSALS } from '../lib/admission/admission'
import { startApp } from './fixtures/app'
import type { Server } from 'node:http'
import { connect, rawStream, waitFor } from './fixtures/sse-connection'

/** What Tarpit uses of a reply: its raw response's 'close' event. */
function replyStub (): { reply: FastifyReply, raw: EventEmitter } {
  const raw = new EventEmitter()
  return { reply: { raw } as unknown as FastifyReply, raw }
}

/** Polls the server's open connections until there are `count` (bounded only against a hang). */
async function waitForConnections (server: Server, count: number): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    const open = await new Promise<number>((resolve, reject) => server.getConnections((e, n) => e ? reject(e) : resolve(n)))
    if (open === count) return
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  throw new Error(`the server never got down to ${count} connections`)
}

const tick = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

t.test('holds at most `capacity` refusals; each is answered once, when its delay is over', async (t) => {
  const tarpit = new Tarpit(2)
  const answered: string[] = []
  t.equal(tarpit.hold(replyStub().reply, 1, () => answered.push('a')), true)
  t.equal(tarpit.hold(replyStub().reply, 1, () => answered.push('b')), true)
  t.equal(tarpit.hold(replyStub().reply, 1, () => answered.push('c')), false, 'full: the caller answers at once')
  await tick(20)
  t.same(answered.sort(), ['a', 'b'])
  t.equal(tarpit.hold(replyStub().reply, 1, () => answered.push('d')), true, 'answered holds free their places')
  tarpit.releaseAll()
  t.same(answered.sort(), ['a', 'b', 'd'])
  await tick(20)
  t.equal(answered.length, 3, 'a released hold is not answered a second time by its timer')
})

t.test('releaseAll answers every held refusal now, and a hold whose client left is never answered', async (t) => {
  const tarpit = new Tarpit(10)
  const answered: string[] = []
  const gone = replyStub()
  tarpit.hold(replyStub().reply, 60_000, () => answered.push('a'))
  tarpit.hold(gone.reply, 60_000, () => answered.push('gone'))
  tarpit.hold(replyStub().reply, 60_000, () => answered.push('b'))
  gone.raw.emit('close')
  tarpit.releaseAll()
  t.same(answered, ['a', 'b'])
  tarpit.releaseAll()
  t.same(answered, ['a', 'b'], 'nothing is held after releaseAll')
})

t.test('a client that hangs up while held frees its place in the tarpit (real sockets)', async (t) => {
  // A storm from the first refusal, and holds far longer than the test: only a hang-up frees a place.
  const { app, port } = await startApp({
    maxClients: 1,
    storm: { refusalsPerSecond: 0, tarpitMs: 60_000 }
  })
  t.teardown(() => app.close())
  const holder = await connect(port)
  // The tarpit full: MAX_HELD_REFUSALS held (in batches of 100, within the listen backlog), two of
  // them clients that will hang up.
  const held: Array<ReturnType<typeof rawStream>> = []
  t.teardown(() => { for (const h of held) h.socket.destroy() })
  while (held.length < MAX_HELD_REFUSALS) {
    for (let i = 0; i < 100 && held.length < MAX_HELD_REFUSALS; i++) held.push(rawStream(port))
    await waitFor(`${held.length} refusals held`, () => app.sse.stats().tarpitted === held.length, 10_000)
  }
  t.equal(app.sse.stats().refusalsHeld, MAX_HELD_REFUSALS, 'the tarpit is full')
  const quitters = held.slice(0, 2)
  for (const q of quitters) q.socket.destroy()
  await waitFor('the two places to be freed', () => app.sse.stats().refusalsHeld === MAX_HELD_REFUSALS - 2)
  await waitForConnections(app.server, 1 + MAX_HELD_REFUSALS - 2)
  const next = [connect(port), connect(port)]
  await waitFor('two more refusals', () => app.sse.stats().rejected === MAX_HELD_REFUSALS + 2)
  t.equal(app.sse.stats().tarpitted, MAX_HELD_REFUSALS + 2, 'both held: the places of the clients that left were freed')
  t.equal(app.sse.stats().refusalsHeld, MAX_HELD_REFUSALS, 'and the tarpit is full again')
  const beyond = await connect(port)
  await beyond.ended
  t.same([beyond.status, app.sse.stats().tarpitted], [503, MAX_HELD_REFUSALS + 2], 'one more is answered at once: no place was left')
  t.equal(quitters.reduce((sum, q) => sum + q.received(), 0), 0, 'nothing was ever sent to the clients that left')
  holder.destroy()
  await app.close()
  for (const c of await Promise.all(next)) t.equal(c.status, 503, 'held refusals answered at shutdown')
})
