import t from 'tap'
import Fastify from 'fastify'
import { Writable } from 'node:stream'
import towerSse from '../lib'
import { injectStream } from '../lib/testing'
import { queryTopics } from './fixtures/app'

t.test('tower-sse/testing: a stream through inject, read event by event, closed, its slot freed', async (t) => {
  const app = Fastify()
  await app.register(towerSse, { maxClients: 1, topicsFromRequest: queryTopics, initialEvent: (client) => ({ data: { type: 'connected', id: client.id } }) })
  t.teardown(() => app.close())
  const stream = await injectStream(app, '/api/events?topics=news')
  t.equal(stream.statusCode, 200)
  t.match(stream.headers['content-type'], /^text\/event-stream/)
  const [connected] = await stream.events(1)
  t.match(JSON.parse(connected.data), { type: 'connected' })
  await app.sse.broadcast({ n: 1 }, { event: 'note', topic: 'news' })
  await app.sse.broadcast({ n: 2 }, { event: 'note', topic: 'news' })
  const notes = await stream.events(2)
  t.same(notes.map((e) => [e.event, JSON.parse(e.data).n]), [['note', 1], ['note', 2]], 'in order, each once')
  t.equal(app.sse.size, 1)
  await stream.close()
  t.equal(app.sse.size, 0, 'close() resolves once the slot is free')
  t.equal(app.sse.stats().disconnected, 1)
  const next = await injectStream(app, '/api/events')
  t.equal(next.statusCode, 200, 'so the one slot admits the next stream')
  await next.close()
})

t.test('a refused stream: its status and body, and events() says the stream ended', async (t) => {
  const app = Fastify()
  await app.register(towerSse, { maxClients: 1 })
  t.teardown(() => app.close())
  const held = await injectStream(app, { url: '/api/events', headers: { 'x-test': '1' } })
  const refused = await injectStream(app, '/api/events')
  t.equal(refused.statusCode, 503)
  t.ok(Number(refused.headers['retry-after']) >= 1)
  await t.rejects(refused.events(1), /the stream ended after 0 of 1 events/)
  await refused.close()
  await held.close()
  t.equal(app.sse.size, 0)
})

t.test('close() is silent: no line at warn or above in the app\'s log (no `request errored: AbortError`), and the slot is free', async (t) => {
  const lines: Array<{ level: number, msg: string }> = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line) as { level: number, msg: string })
      done()
    }
  })
  const app = Fastify({ logger: { level: 'trace', stream } })
  await app.register(towerSse, { maxClients: 1, initialEvent: () => ({ data: 'hi' }) })
  app.get('/own', { eventStream: true }, (_request, reply) => reply.eventStream.subscribe({
    stream: (async function * () { yield { data: 'own' } })(),
    keepOpen: true
  }))
  t.teardown(() => app.close())
  for (const url of ['/api/events', '/own', '/api/events']) {
    const injected = await injectStream(app, url)
    t.equal(injected.statusCode, 200, `${url}: the one slot is free again each time`)
    await injected.events(1)
    await injected.close()
    t.equal(app.sse.size, 0, 'the slot is free once close() resolves')
  }
  t.equal(app.sse.stats().disconnected, 3, 'each counted as a client leaving')
  t.ok(lines.some((line) => line.msg === 'incoming request'), 'the logger is on: Fastify logged the requests')
  t.same(lines.filter((line) => line.level >= 40).map((line) => `${line.level} ${line.msg}`), [], 'nothing at warn, error or fatal')
})
