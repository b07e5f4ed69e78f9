import fc from 'fast-check'
import t from 'tap'
import { formatEventId, MAX_LAST_EVENT_ID_LENGTH, newEpoch, parseEventId } from '../lib/event-id'

t.test('every id we format parses back to its epoch and seq', async () => {
  fc.assert(fc.property(
    fc.integer({ min: 0, max: 8.64e15 }),
    fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
    (now, seq) => {
      const epoch = newEpoch(now)
      const parsed = parseEventId(formatEventId(epoch, seq))
      return String(seq).length > 15 ? parsed === null : parsed !== null && parsed.epoch === epoch && parsed.seq === seq
    }
  ))
})

t.test('the epoch is the clock in base 36', async (t) => {
  t.equal(newEpoch(0), '0')
  t.equal(newEpoch(1_700_000_000_000), (1_700_000_000_000).toString(36))
})

t.test('absent, over-long and foreign ids are ignored', async (t) => {
  for (const id of [undefined, '', '5', 'abc', 'a-0', 'a-01', 'A-1', 'a-1 ', `a-${'1'.repeat(16)}`, 'a-1-2', '0123456789ab-1']) {
    t.equal(parseEventId(id), null, JSON.stringify(id))
  }
  t.equal(parseEventId(`${'a'.repeat(MAX_LAST_EVENT_ID_LENGTH)}-1`), null)
  fc.assert(fc.property(fc.string(), (s) => {
    const parsed = parseEventId(s)
    return parsed === null || formatEventId(parsed.epoch, parsed.seq) === s
  }))
})
