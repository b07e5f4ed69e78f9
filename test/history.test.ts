import fc from 'fast-check'
import t from 'tap'
import { History } from '../lib/history'

const frame = (bytes: number): Buffer => Buffer.alloc(bytes, 'x')

t.test('keeps the newest events within maxEvents and maxBytes, always the newest one', async () => {
  fc.assert(fc.property(
    fc.integer({ min: 0, max: 20 }),
    fc.integer({ min: 0, max: 400 }),
    fc.array(fc.integer({ min: 1, max: 120 }), { maxLength: 80 }),
    (maxEvents, maxBytes, sizes) => {
      const history = new History(maxEvents, maxBytes)
      for (const size of sizes) history.push(frame(size), undefined)
      if (history.lastSeq !== sizes.length) return false
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

t.test('since(seq) replays exactly the held events after seq, or says why it cannot', async () => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 10 }),
    fc.integer({ min: 0, max: 30 }),
    fc.integer({ min: 0, max: 40 }),
    (maxEvents, pushes, from) => {
      const history = new History(maxEvents, 1 << 20)
      for (let i = 0; i < pushes; i++) history.push(frame(1), i % 2 === 0 ? 'even' : undefined)
      const oldest = pushes - history.size + 1
      const result = history.since(from)
      if (from > pushes) return result.kind === 'resync' && result.reason === 'unknown'
      if (from < oldest - 1) return result.kind === 'resync' && result.reason === 'too-old'
      return result.kind === 'replay' &&
        result.entries.map((e) => e.seq).join() === Array.from({ length: pushes - from }, (_, i) => from + 1 + i).join() &&
        result.entries.every((e) => e.topic === (e.seq % 2 === 1 ? 'even' : undefined))
    }
  ), { numRuns: 1000 })
})

t.test('since() at the edges of what is held', async (t) => {
  const history = new History(3, 1 << 20)
  for (let i = 0; i < 10; i++) history.push(frame(1), undefined)
  const seqs = (from: number): unknown => {
    const result = history.since(from)
    return result.kind === 'replay' ? result.entries.map((e) => e.seq) : result
  }
  t.same(seqs(7), [8, 9, 10], 'just before the oldest held: everything held')
  t.same(seqs(6), { kind: 'resync', reason: 'too-old' }, 'one further back: a gap, so resync')
  t.same(seqs(10), [], 'up to date')
  t.same(seqs(11), { kind: 'resync', reason: 'unknown' }, 'from the future')
})

t.test('frames are shared, not copied, and evicted slots are compacted away', async (t) => {
  const history = new History(2, 1 << 20)
  const first = frame(3)
  t.equal(history.push(first, undefined).frame, first)
  for (let i = 0; i < 5000; i++) history.push(frame(1), undefined)
  t.equal(history.size, 2)
  t.equal(history.nextSeq, 5002)
  const replay = history.since(4999)
  t.same(replay.kind === 'replay' ? replay.entries.map((e) => e.seq) : replay, [5000, 5001])
  t.ok((history as unknown as { entries: unknown[] }).entries.length < 2100, 'the backing array does not grow with every broadcast')
})
