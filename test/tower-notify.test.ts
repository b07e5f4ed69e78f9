import t from 'tap'
import { connect } from './fixtures/sse-connection'
import { notify, startTower } from './fixtures/tower'

t.test('a notification reaches every open stream as one message with its id', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const clients = await Promise.all([connect(port), connect(port), connect(port)])
  for (const c of clients) {
    const first = await c.nextEvent(0)
    t.equal(JSON.parse(first.data).type, 'connected', 'Tower greets each stream first')
  }
  const sent = { type: 'build', title: 'Build failed', body: 'tsc: 3 errors\nsee the log', workspace: 'tower-sse' }
  const res = await notify(port, sent)
  t.equal(res.status, 200)
  const reply = JSON.parse(res.body)
  t.equal(reply.delivered, 3)
  t.match(reply.id, /^[0-9a-z]+-1$/, 'the first broadcast\'s event id')
  for (const c of clients) {
    const event = await c.nextEvent(1)
    t.equal(event.event, undefined, 'a plain message, so EventSource onmessage sees it')
    t.same(JSON.parse(event.data), { id: reply.id, ...sent })
    t.equal(event.id, reply.id, 'the notification id is the SSE id a client resumes from')
  }
  const second = JSON.parse((await notify(port, { type: 'test', title: 'Again', body: '' })).body)
  t.not(second.id, reply.id, 'each notification has its own id')
  for (const c of clients) t.same(JSON.parse((await c.nextEvent(2)).data).title, 'Again')
  for (const c of clients) c.destroy()
})

t.test('workspace is the topic: streams subscribed to other topics do not get it', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const all = await connect(port)
  const mine = await connect(port, '/api/events?topics=alpha,beta')
  const other = await connect(port, '/api/events?topics=gamma')
  await Promise.all([all.nextEvent(0), mine.nextEvent(0), other.nextEvent(0)])
  const res = JSON.parse((await notify(port, { type: 'deploy', title: 'Deployed', body: 'ok', workspace: 'beta' })).body)
  t.equal(res.delivered, 2)
  t.equal(JSON.parse((await all.nextEvent(1)).data).workspace, 'beta')
  t.equal(JSON.parse((await mine.nextEvent(1)).data).workspace, 'beta')
  // Without a workspace a notification goes to every stream, including `other`: once it
  // arrives there, the beta one would have arrived first had it been sent to it.
  await notify(port, { type: 'deploy', title: 'For all', body: '' })
  t.equal(JSON.parse((await other.nextEvent(1)).data).title, 'For all')
  for (const c of [all, mine, other]) c.destroy()
})

const badBodies: Array<[string, unknown, RegExp | string, string?]> = [
  ['missing field', { type: 'build', body: 'x' }, 'body is missing the required property "title"'],
  ['wrong type (not coerced)', { type: 5, title: 't', body: 'b' }, 'body/type must be string'],
  ['wrong type in body', { type: 'a', title: 't', body: ['b'] }, 'body/body must be string'],
  ['extra property (not dropped)', { type: 'a', title: 't', body: 'b', urgent: true },
    'body has an unknown property "urgent" (allowed: type, title, body, workspace)'],
  ['title too long', { type: 'a', title: 'x'.repeat(201), body: 'b' }, 'body/title must NOT have more than 200 characters'],
  ['body too long', { type: 'a', title: 't', body: 'x'.repeat(4001) }, 'body/body must NOT have more than 4000 characters'],
  ['empty type', { type: '', title: 't', body: 'b' }, 'body/type must not be empty'],
  ['empty title', { type: 'a', title: '', body: 'b' }, 'body/title must not be empty'],
  ['reserved type', { type: 'connected', title: 't', body: 'b' }, 'body/type "connected" is reserved for the first message of every stream'],
  ['workspace that cannot be a topic', { type: 'a', title: 't', body: 'b', workspace: 'my\nworkspace' },
    'body/workspace (the event\'s topic): topic "my\\nworkspace" must be 1-256 characters with no control character or line break'],
  ['not an object', ['a', 'b'], 'body must be object'],
  ['null', null, 'body must be object'],
  ['not JSON', '{"type": "a", title', /not valid JSON/],
  ['empty JSON body', '', /empty/i]
]

t.test('a bad body is a 400 saying what is wrong, and nothing is broadcast', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const listener = await connect(port)
  await listener.nextEvent(0)
  for (const [what, body, message] of badBodies) {
    const res = await notify(port, body)
    t.equal(res.status, 400, `${what}: 400`)
    const reply = JSON.parse(res.body)
    t.match(reply.code, /^(TOWER_NOTIFY_INVALID|FST_ERR_CTP_[A-Z_]+)$/, `${what}: a stable code (Fastify's own for a body that is not JSON)`)
    if (typeof message === 'string') t.equal(reply.message, message, what)
    else t.match(reply.message, message, what)
  }
  const res = await notify(port, 'type=a&title=t&body=b', 'application/x-www-form-urlencoded')
  t.equal(res.status, 415, 'a body that is not JSON at all: unsupported media type')
  t.equal(app.sse.stats().events, 0, 'no bad body was broadcast')
  t.equal(listener.events.length, 1, 'the listener saw only its greeting')
  listener.destroy()
})

t.test('an oversized body is refused before it is parsed', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const res = await notify(port, { type: 'a', title: 't', body: 'x'.repeat(20_000) })
  t.equal(res.status, 413)
  t.equal(app.sse.stats().events, 0)
})

t.test('with nobody listening a notification is accepted and reaches no one', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const res = await notify(port, { type: 'a', title: 't', body: 'b' })
  t.equal(res.status, 200)
  t.equal(JSON.parse(res.body).delivered, 0)
  t.equal(app.sse.stats().events, 1)
})
