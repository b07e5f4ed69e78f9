import t from 'tap'
import fc from 'fast-check'
import { createParser, type EventSourceMessage } from 'eventsource-parser'
import { encodeEvent, encodeRetry } from '../lib/events/encoder'
import { errorCodes } from '../lib'

const EventFieldError = errorCodes.TOWER_SSE_BAD_FIELD

function parse (frames: Buffer[]): { events: EventSourceMessage[], retries: number[] } {
  const events: EventSourceMessage[] = []
  const retries: number[] = []
  const parser = createParser({ onEvent: (e) => events.push(e), onRetry: (ms) => retries.push(ms) })
  for (const frame of frames) parser.feed(frame.toString('utf8'))
  return { events, retries }
}

t.test('frames: id, event, one data line per line of data', async (t) => {
  t.equal(encodeEvent({ data: 'hi' }).toString(), 'data: hi\n\n')
  t.equal(encodeEvent({ data: { a: 1 }, event: 'note', id: '7' }).toString(), 'id: 7\nevent: note\ndata: {"a":1}\n\n')
  t.equal(encodeEvent({ data: 'a\nb\r\nc\rd' }).toString(), 'data: a\ndata: b\ndata: c\ndata: d\n\n')
  t.equal(encodeEvent({ data: '' }).toString(), 'data: \n\n')
  t.equal(encodeRetry(1500).toString(), 'retry: 1500\n\n')
})

t.test('hostile field values are refused with a TypeError and a stable code', async (t) => {
  for (const bad of ['a\nb', 'a\rb', 'a\0b', 'x\n\ndata: injected']) {
    t.throws(() => encodeEvent({ data: 'x', event: bad }), { code: 'TOWER_SSE_BAD_FIELD' }, `event ${JSON.stringify(bad)}`)
    t.throws(() => encodeEvent({ data: 'x', id: bad }), { code: 'TOWER_SSE_BAD_FIELD' }, `id ${JSON.stringify(bad)}`)
  }
  const notString = t.throws(() => encodeEvent({ data: 'x', event: 5 as unknown as string }), { code: 'TOWER_SSE_BAD_FIELD' })
  t.type(notString, TypeError)
  t.type(notString, EventFieldError)
  t.match(notString, { message: /event event must be a string, got number/ })
  t.throws(() => encodeEvent({ data: undefined }), { code: 'TOWER_SSE_UNENCODABLE_DATA' })
  t.throws(() => encodeEvent({ data: () => 1 }), { code: 'TOWER_SSE_UNENCODABLE_DATA' })
  t.throws(() => encodeRetry(-1), { code: 'TOWER_SSE_BAD_RETRY' })
  t.throws(() => encodeRetry(1.5), { code: 'TOWER_SSE_BAD_RETRY' })
})

t.test('property: every event the encoder accepts parses back to the same event', async (t) => {
  const fieldValue = fc.string({ unit: 'grapheme', maxLength: 20 }).filter((s) => !/[\r\n\0]/.test(s))
  const dataValue = fc.oneof(
    fc.string({ unit: 'grapheme', maxLength: 60 }),
    fc.jsonValue({ maxDepth: 3 })
  )
  fc.assert(fc.property(
    dataValue, fc.option(fieldValue, { nil: undefined }), fc.option(fieldValue, { nil: undefined }),
    (data, event, id) => {
      const { events } = parse([encodeEvent({ data, event, id })])
      if (events.length !== 1) return false
      const [parsed] = events
      const text = typeof data === 'string' ? data.replace(/\r\n|\r/g, '\n') : JSON.stringify(data)
      // The parser strips one leading space after "field:"; an id with NUL would be ignored.
      return parsed.data === text &&
        parsed.event === (event === undefined || event === '' ? undefined : event) &&
        parsed.id === (id === undefined ? undefined : id)
    }
  ), { numRuns: 2000 })
  t.pass('2000 random events round-tripped')
})

t.test('property: retry frames parse back to the same delay', async (t) => {
  fc.assert(fc.property(fc.nat({ max: 2 ** 31 - 1 }), (ms) => {
    const { retries, events } = parse([encodeRetry(ms)])
    return events.length === 0 && retries.length === 1 && retries[0] === ms
  }), { numRuns: 500 })
  t.pass('500 retry values round-tripped')
})
