import fc from 'fast-check'
import t from 'tap'
import { comparePositions, formatEventId, MAX_LAST_EVENT_ID_LENGTH, newEpoch, parseEventId, type EventPosition } from '../lib/bus/event-id'

const offset = fc.integer({ min: 1, max: 10 ** 15 })
const position = fc.record({
  epoch: fc.integer({ min: 0, max: 8.64e15 }).map((now) => newEpoch(now)),
  major: offset,
  minor: fc.option(fc.integer({ min: 0, max: 10 ** 15 }), { nil: null })
})

t.test('every id we format parses back to its position (memory: one integer; Redis: two)', async () => {
  fc.assert(fc.property(position, (p) => {
    const parsed = parseEventId(formatEventId(p))
    return parsed !== null && parsed.epoch === p.epoch && parsed.major === p.major && parsed.minor === p.minor
  }))
})

t.test('positions order like the bus orders events, and only within one epoch', async (t) => {
  fc.assert(fc.property(position, position, (a, b) => {
    const same: EventPosition = { ...b, epoch: a.epoch }
    const order = comparePositions(a, same)
    const expected = a.major !== same.major ? Math.sign(a.major - same.major) : Math.sign((a.minor ?? 0) - (same.minor ?? 0))
    return order === expected && comparePositions(same, a) === -order
  }))
  t.equal(comparePositions({ epoch: 'e', major: 9, minor: null }, { epoch: 'e', major: 10, minor: null }), -1, 'numbers, not strings')
  t.equal(comparePositions({ epoch: 'e', major: 5, minor: 1 }, { epoch: 'e', major: 5, minor: 0 }), 1)
})

t.test('the epoch is the clock in base 36', async (t) => {
  t.equal(newEpoch(0), '0')
  t.equal(newEpoch(1_700_000_000_000), (1_700_000_000_000).toString(36))
})

t.test('absent, over-long and foreign ids are ignored', async (t) => {
  for (const id of [undefined, '', '5', 'abc', 'a-0', 'a-01', 'A-1', 'a-1 ', `a-${'1'.repeat(17)}`, 'a-1-2-3', 'a-1-01', '0123456789abcdefg-1']) {
    t.equal(parseEventId(id), null, JSON.stringify(id))
  }
  t.equal(parseEventId(`${'a'.repeat(MAX_LAST_EVENT_ID_LENGTH)}-1`), null)
  fc.assert(fc.property(fc.string(), (s) => {
    const parsed = parseEventId(s)
    return parsed === null || formatEventId(parsed) === s
  }))
})
