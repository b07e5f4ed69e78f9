import fc from 'fast-check'
import t from 'tap'
import type { EventPosition } from '../lib/bus/event-id'
import { History, type HistoryEntry } from '../lib/events/history'

const frame = (bytes: number): Buffer => Buffer.alloc(bytes, 'x')
/** The memory bus's positions: one integer per event, in epoch 'e'. */
const at = (major: number, epoch = 'e'): EventPosition => ({ epoch, major, minor: null })
const entry = (major: number, bytes = 1, topic?: string): HistoryEntry => ({ position: at(major), frame: frame(bytes), topic })
const majors = (history: History, from: EventPosition): unknown => {
  const result = history.since(from)
  return result.kind === 'replay' ? result.entries.map((e) => e.position.major) : result
}

t.test('keeps the newest events within maxEvents and maxBytes, always the newest one', async () => {
  fc.assert(fc.property(
    fc.integer({ min: 0, max: 20 }),
    fc.integer({ min: 0, max: 400 }),
    fc.array(fc.integer({ min: 1, max: 120 }), { maxLength: 80 }),
    (maxEvents, maxBytes, sizes) => {
      const history = new History(maxEvents, maxBytes, at(0))
      sizes.forEach((size, i) => history.push(entry(i + 1, size)))
      if (maxEvents === 0) return history.size === 0 && history.byteLength === 0
      const kept = sizes.slice(sizes.length - history.size)
      const bytes = kept.reduce((sum, n) => sum + n, 0)
      if (history.size > maxEvents || bytes !== history.byteLength) return false
      if (sizes.length > 0 && history.size === 0) return false
      // Over the byte bound only when the newest event alone is larger than it.
      if (history.byteLength > maxBytes && history.size !== 1) return false
      // Nothing was evicted that would have fitted: one more (older) event would break a bound.
      const older = sizes[sizes.length - history.size - 1]
      return older === undefined || history.size === maxEvents || bytes + older > maxBytes
    }
  ))
})

t.test('since(position) replays exactly the held events after it, or says why it cannot', async () => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 10 }),
    fc.integer({ min: 0, max: 30 }),
    fc.integer({ min: 0, max: 40 }),
    (maxEvents, pushes, from) => {
      const history = new History(maxEvents, 1 << 20, at(0))
      for (let i = 1; i <= pushes; i++) history.push(entry(i, 1, i % 2 === 1 ? 'odd' : undefined))
      const oldest = pushes - history.size + 1
      const result = history.since(at(from))
      if (from > pushes) return result.kind === 'ahead'
      if (from < oldest - 1) return result.kind === 'miss' && result.reason === 'too-old'
      return result.kind === 'replay' &&
        result.entries.map((e) => e.position.major).join() === Array.from({ length: pushes - from }, (_, i) => from + 1 + i).join() &&
        result.entries.every((e) => e.topic === (e.position.major % 2 === 1 ? 'odd' : undefined))
    }
  ), { numRuns: 1000 })
})

t.test('since() at the edges of what is held', async (t) => {
  const history = new History(3, 1 << 20, at(0))
  for (let i = 1; i <= 10; i++) history.push(entry(i))
  t.same(majors(history, at(7)), [8, 9, 10], 'just before the oldest held: everything held')
  t.same(majors(history, at(6)), { kind: 'miss', reason: 'too-old' }, 'one further back: a gap, so resync')
  t.same(majors(history, at(10)), [], 'up to date')
  t.same(majors(history, at(11)), { kind: 'ahead' }, 'newer than anything delivered here')
  t.same(majors(history, at(9, 'other')), { kind: 'miss', reason: 'unknown' }, 'another epoch: not ours')
})

t.test('positions are compared, not subtracted: gaps and two-part (Redis) offsets', async (t) => {
  const history = new History(10, 1 << 20, { epoch: 'r', major: 0, minor: null })
  const ids: Array<[number, number]> = [[1700, 0], [1700, 1], [1705, 0], [1900, 3]]
  for (const [major, minor] of ids) history.push({ position: { epoch: 'r', major, minor }, frame: frame(1), topic: undefined })
  const after = (major: number, minor: number): unknown => {
    const result = history.since({ epoch: 'r', major, minor })
    return result.kind === 'replay' ? result.entries.map((e) => `${e.position.major}-${e.position.minor ?? ''}`) : result
  }
  t.same(after(1700, 1), ['1705-0', '1900-3'])
  t.same(after(1705, 0), ['1900-3'])
  t.same(after(1800, 0), { kind: 'miss', reason: 'unknown' }, 'inside the range but no event of ours: not an id we gave')
  t.same(after(1900, 4), { kind: 'ahead' })
})

t.test('a new epoch empties the ring: what it held belongs to a history that is gone', async (t) => {
  const history = new History(10, 1 << 20, at(0))
  for (let i = 1; i <= 3; i++) history.push(entry(i))
  history.push({ position: at(1, 'f'), frame: frame(5), topic: undefined })
  t.equal(history.size, 1)
  t.equal(history.byteLength, 5)
  t.same(majors(history, at(2)), { kind: 'miss', reason: 'unknown' }, 'an id of the old epoch')
  t.same(majors(history, at(0, 'f')), [1])
})

t.test('extendBack takes in older events read for a resume, only when they fit', async (t) => {
  const history = new History(5, 1 << 20, at(0))
  for (let i = 1; i <= 8; i++) history.push(entry(i))
  t.same(majors(history, at(2)), { kind: 'miss', reason: 'too-old' })
  // A bus read of everything after 2 (up to the newest): 3 is older than the ring's floor (3).
  history.extendBack(at(2), [3, 4, 5, 6, 7, 8].map((n) => entry(n)))
  t.same(majors(history, at(2)), { kind: 'miss', reason: 'too-old' }, 'would pass maxEvents: the ring never drops newer events for older ones')
  // An instance that joined the bus at 5 holds nothing older: a reconnect wave's first read fills it.
  const joined = new History(10, 1 << 20, at(5))
  joined.push(entry(6))
  t.same(majors(joined, at(2)), { kind: 'miss', reason: 'too-old' })
  joined.extendBack(at(2), [3, 4, 5, 6].map((n) => entry(n)))
  t.same(majors(joined, at(2)), [3, 4, 5, 6], 'the next resume of the wave is served from the ring')
  t.same(majors(joined, at(4)), [5, 6])
})

t.test('frames are shared, not copied, and evicted slots are compacted away', async (t) => {
  const history = new History(2, 1 << 20, at(0))
  const first = entry(1, 3)
  history.push(first)
  for (let i = 2; i <= 5001; i++) history.push(entry(i))
  t.equal(history.size, 2)
  const replay = history.since(at(4999))
  t.same(replay.kind === 'replay' ? replay.entries.map((e) => e.position.major) : replay, [5000, 5001])
  const held = history.since(at(5000))
  t.equal(held.kind === 'replay' ? held.entries[0].frame : null, (history as unknown as { entries: Array<HistoryEntry | undefined> }).entries.at(-1)?.frame, 'the very Buffer pushed')
  t.ok((history as unknown as { entries: unknown[] }).entries.length < 2100, 'the backing array does not grow with every broadcast')
})
