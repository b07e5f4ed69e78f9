import t from 'tap'
import fc from 'fast-check'
import { topicsFromQuery } from '../lib'
import { MAX_TOPIC_LENGTH, MAX_TOPICS } from '../lib/events/topic'
import { checkTopic } from '../lib/events/topic'
import { topicSet } from '../lib/route/stream-request'
import { startApp } from './fixtures/app'
import { connect, waitFor } from './fixtures/sse-connection'

// One rule for every topic name (grants, ?topics=, broadcast): any printable id of 1 to
// MAX_TOPIC_LENGTH characters; no control character, no line break; at most MAX_TOPICS per stream.

const FORBIDDEN = /[\p{Cc}\p{Cs}\p{Zl}\p{Zp}]/u
/** Any code point that is not a control character, a line/paragraph separator or a surrogate. */
const printable = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 60 })
  .map((s) => [...s].filter((c) => !FORBIDDEN.test(c)).join(''))
  .filter((s) => s.length > 0 && [...s].length <= MAX_TOPIC_LENGTH)
const forbiddenChar = fc.oneof(
  fc.integer({ min: 0, max: 0x1f }), fc.integer({ min: 0x7f, max: 0x9f }), fc.constantFrom(0x2028, 0x2029, 0xd800, 0xdfff)
).map((code) => String.fromCharCode(code))

t.test('real ids are topics: emails, paths, UUIDs, any printable text up to the limit', async (t) => {
  for (const topic of ['user:alice@example.com', 'job/1234', '4b0c1f5e-8a8e-4b8a-9f43-1f2d3c4b5a69', 'équipe café ☕', 'a b', '*', 'x'.repeat(MAX_TOPIC_LENGTH), '😀'.repeat(MAX_TOPIC_LENGTH)]) {
    t.equal(checkTopic(topic), topic, topic.slice(0, 40))
  }
  fc.assert(fc.property(printable, (topic) => checkTopic(topic) === topic))
})

t.test('one coded error for a bad topic: it names the topic (escaped, truncated) and the limit', async (t) => {
  fc.assert(fc.property(fc.string(), forbiddenChar, fc.string(), (before, bad, after) => {
    const topic = before + bad + after
    try {
      checkTopic(topic)
      return false
    } catch (error) {
      const { code, statusCode, message } = error as { code: string, statusCode: number, message: string }
      // Escaped: the message carries no raw control character, line break or lone surrogate.
      return code === 'TOWER_SSE_BAD_TOPIC' && statusCode === 400 && !FORBIDDEN.test(message) &&
        message.includes(`1-${MAX_TOPIC_LENGTH} characters`) && message.length < 600
    }
  }))
  t.throws(() => checkTopic('x'.repeat(100_000)), {
    code: 'TOWER_SSE_BAD_TOPIC',
    message: `tower-sse: topic "${'x'.repeat(64)}"… (100000 characters) must be 1-${MAX_TOPIC_LENGTH} characters with no control character or line break`
  })
  t.throws(() => checkTopic(''), { code: 'TOWER_SSE_BAD_TOPIC', message: /topic "" must be 1-256/ })
  t.throws(() => checkTopic(42), { code: 'TOWER_SSE_BAD_TOPIC', message: /a topic must be .*, got 42/ })
  t.throws(() => topicSet(Array.from({ length: MAX_TOPICS + 1 }, (_, i) => `t${i}`)),
    { code: 'TOWER_SSE_BAD_TOPIC', message: `tower-sse: a stream may be granted at most ${MAX_TOPICS} topics, got ${MAX_TOPICS + 1}` })
  t.equal((topicSet(Array.from({ length: MAX_TOPICS }, (_, i) => `t${i}`)) as Set<string>).size, MAX_TOPICS)
})

t.test('on the wire: an email, a path and a UUID are granted through ?topics= and reached by broadcast; a bad one is a 400 before any stream header', async (t) => {
  const { app, port } = await startApp({ heartbeatMs: 60_000, topicsFromRequest: topicsFromQuery({ allow: () => true }) })
  t.teardown(() => app.close())
  const topics = ['user:alice@example.com', 'job/1234', '4b0c1f5e-8a8e-4b8a-9f43-1f2d3c4b5a69']
  const stream = await connect(port, `/api/events?topics=${encodeURIComponent(topics.join(','))}`)
  t.equal(stream.status, 200)
  await waitFor('open', () => app.sse.size === 1)
  for (const topic of topics) t.equal((await app.sse.broadcast(topic, { topic })).delivered, 1, topic)
  await waitFor('three events', () => stream.events.length === 3)
  t.same(stream.events.map((e) => e.data), topics)
  await t.rejects(app.sse.broadcast('x', { topic: 'job\n1' }), { code: 'TOWER_SSE_BAD_TOPIC', message: /topic "job\\n1" must be 1-256 characters/ })
  const bad = await connect(port, `/api/events?topics=${encodeURIComponent('job\u00851')}`)
  await bad.ended
  t.equal(bad.status, 400)
  t.match(JSON.parse(bad.body), { code: 'TOWER_SSE_BAD_TOPIC', message: /topic "job\\u00851" must be/ })
  t.notOk(FORBIDDEN.test(bad.body), 'the 400 carries no raw control character')
  stream.destroy()
})
