import fc from 'fast-check'
import t from 'tap'
import { Continuity, judgeRange, type Step } from '../lib/bus/redis/continuity'
import type { EntryPlace, StreamEntry } from '../lib/bus/redis/entry-codec'
import type { EventPosition } from '../lib/bus/event-id'

// The Redis bus's continuity state, without Redis: whatever the reader reads and the check finds,
// it delivers an event only right after the one it delivered last (or after the point it told
// every stream to resync at), and a new epoch counts as continuous only when its marker names
// exactly that event.

/** What the reader meets next, interpreted against where it stands (so every run is meaningful). */
interface Op {
  kind: 'entry' | 'marker' | 'idle'
  /** entry: of the current epoch, of another one, or the current epoch's own marker. */
  epoch: 'current' | 'other' | 'own-marker'
  /** The sequence number's distance from the last delivered one (1: the next; above: a hole; 0 and below: gone back). */
  seqDelta: number
  /** marker, and the marker a check follows: what it says the epoch before it ended at. */
  previous: 'exact' | 'behind' | 'ahead' | 'none' | 'other-epoch'
  /** When a check is due: the server still in the reader's epoch, or in a new one (a restart, a failover). */
  meta: 'same' | 'new'
  /** When a check is due: the stream's newest id against the reader's cursor (null: the stream is empty). */
  tailDelta: number | null
}

const op: fc.Arbitrary<Op> = fc.record({
  kind: fc.constantFrom('entry', 'entry', 'entry', 'marker', 'idle'),
  epoch: fc.constantFrom('current', 'current', 'current', 'other', 'own-marker'),
  seqDelta: fc.integer({ min: -2, max: 3 }),
  previous: fc.constantFrom('exact', 'exact', 'behind', 'ahead', 'none', 'other-epoch'),
  meta: fc.constantFrom('same', 'same', 'new'),
  tailDelta: fc.option(fc.integer({ min: -1, max: 1 }), { freq: 5 })
})

/** Runs the ops against a fresh state, asserting the continuity rule at every step; returns what the streams saw. */
function run (ops: Op[], startSeq: number): string[] {
  const state = new Continuity()
  let ms = 1
  let epochs = 0
  const fresh = (): string => `e${++epochs}`
  state.start('e0', startSeq, '1-0', undefined)
  /** What the streams have: the last event delivered, or the point they resynced at. */
  let last = { epoch: 'e0', seq: startSeq }
  const tainted = new Set<string>()
  const seen: string[] = []
  const fail = (why: string): never => { throw new Error(`${why} (so far: ${seen.join(' ')})`) }

  const previousOf = (how: Op['previous']): EntryPlace['previous'] => {
    switch (how) {
      case 'exact': return { epoch: last.epoch, seq: last.seq }
      case 'behind': return { epoch: last.epoch, seq: last.seq - 1 }
      case 'ahead': return { epoch: last.epoch, seq: last.seq + 1 }
      case 'other-epoch': return { epoch: 'elsewhere', seq: last.seq }
      case 'none': return undefined
    }
  }
  const followed = (step: Step, epoch: string, previous: EntryPlace['previous']): void => {
    if (step.kind !== 'epoch' || step.at.epoch !== epoch) return fail(`a new epoch's marker gave ${JSON.stringify(step)}`)
    const proven = previous !== undefined && previous.epoch === last.epoch && previous.seq === last.seq
    if (step.continuous !== proven) fail(`epoch ${epoch} after ${last.epoch}/${last.seq} with marker ${JSON.stringify(previous)} judged continuous=${String(step.continuous)}`)
    seen.push(proven ? `→${epoch}` : `resync@${epoch}/0`)
    last = { epoch, seq: 0 }
  }

  for (const o of ops) {
    if (state.checkDue) {
      // The check, as the bus runs it: the server's epoch, then (same epoch) the counter and the tail.
      let epoch = o.meta === 'same' ? last.epoch : fresh()
      let previous = previousOf(o.previous)
      if (epoch === last.epoch) {
        const counter = last.seq + o.seqDelta - 1
        const cursorMs = Number(state.cursor.split('-')[0])
        const tail = o.tailDelta === null ? undefined : `${cursorMs + o.tailDelta}-0`
        const rotate = state.mustRotate(counter, tail)
        const lost = counter < last.seq || tail === undefined || (o.tailDelta ?? 0) < 0
        if (lost && !rotate) fail(`counter ${counter} / tail ${String(tail)} below ${last.seq} / ${state.cursor} kept epoch ${epoch}`)
        if (tainted.has(epoch) && !rotate) fail(`epoch ${epoch} kept after its sequence went back`)
        if (rotate) {
          // The script's rotate: a new epoch whose marker vouches for nothing.
          epoch = fresh()
          previous = undefined
        }
      }
      if (!state.checked(epoch)) continue
      followed(state.follow(epoch, `${++ms}-0`, previous), epoch, previous)
      continue
    }
    if (o.kind === 'idle') {
      state.suspect()
      continue
    }
    const id = `${++ms}-0`
    if (o.kind === 'marker') {
      const epoch = fresh()
      const previous = previousOf(o.previous)
      followed(state.read(id, { epoch, seq: 0, previous }), epoch, previous)
      continue
    }
    const place: EntryPlace = o.epoch === 'own-marker'
      ? { epoch: last.epoch, seq: 0 }
      : { epoch: o.epoch === 'current' ? last.epoch : fresh(), seq: Math.max(1, last.seq + o.seqDelta) }
    if (place.epoch === last.epoch && place.seq !== 0 && place.seq <= last.seq) tainted.add(place.epoch)
    const step = state.read(id, place)
    switch (step.kind) {
      case 'next':
        if (tainted.has(place.epoch)) fail(`delivered ${place.epoch}/${place.seq} of an epoch whose sequence went back`)
        if (place.epoch !== last.epoch || place.seq !== last.seq + 1) fail(`delivered ${place.epoch}/${place.seq} after ${last.epoch}/${last.seq}`)
        seen.push(`${place.epoch}/${place.seq}`)
        last = { epoch: place.epoch, seq: place.seq }
        break
      case 'gap':
        if (place.epoch !== last.epoch || place.seq <= last.seq + 1) fail(`a resync at ${place.epoch}/${place.seq} after ${last.epoch}/${last.seq} is no hole`)
        if (step.at.epoch !== place.epoch || `${step.at.major}-${step.at.minor}` !== id) fail(`resync at ${JSON.stringify(step.at)}, not at the entry ${id}`)
        seen.push(`resync@${place.epoch}/${place.seq}`)
        last = { epoch: place.epoch, seq: place.seq }
        break
      case 'same':
        if (place.seq !== 0 || place.epoch !== last.epoch) fail(`${place.epoch}/${place.seq} ignored`)
        break
      case 'check':
        if (!state.checkDue) fail('a check asked for and not due')
        break
      case 'epoch':
        fail(`an entry that is no marker changed the epoch: ${JSON.stringify(place)}`)
    }
    if (state.epoch !== last.epoch) fail(`the state is in ${String(state.epoch)}, the streams in ${last.epoch}`)
  }
  return seen
}

t.test('for any reads, holes, rollbacks, idle spells and epoch changes, nothing is delivered past a hole it cannot prove empty: it resyncs', async (t) => {
  fc.assert(fc.property(fc.array(op, { maxLength: 60 }), fc.nat(4), (ops, startSeq) => { run(ops, startSeq) }), { numRuns: 2000 })
  t.pass('2000 runs')
})

t.test('the next event is delivered, a hole resyncs at the entry after it, a sequence gone back calls for the check', async (t) => {
  const state = new Continuity()
  state.start('a', 3, '1-0', { id: '5-0', place: { epoch: 'a', seq: 3 } })
  t.equal(state.cursor, '5-0', 'reading starts after the epoch\'s newest entry')
  t.same(state.read('6-0', { epoch: 'a', seq: 4 }), { kind: 'next' })
  t.same(state.read('8-0', { epoch: 'a', seq: 6 }), { kind: 'gap', at: { epoch: 'a', major: 8, minor: 0 } })
  t.same(state.read('9-0', { epoch: 'a', seq: 7 }), { kind: 'next' })
  t.same(state.read('10-0', { epoch: 'a', seq: 7 }), { kind: 'check' })
  t.ok(state.checkDue)
  t.same(state.read('11-0', { epoch: 'a', seq: 8 }), { kind: 'check' }, 'nothing is judged while the check is due')
  t.ok(state.mustRotate(9, '11-0'), 'the sequence went back: the epoch is retired even though counter and tail look fine')
  t.equal(state.checked('b'), true)
  t.same(state.follow('b', '12-0', undefined), { kind: 'epoch', at: { epoch: 'b', major: 12, minor: 0 }, continuous: false })
  t.ok(state.left('a'))
})

t.test('a new epoch is continuous only when its marker names exactly the last event delivered', async (t) => {
  const state = new Continuity()
  state.start('a', 2, '1-0', undefined)
  t.same(state.read('2-0', { epoch: 'b', seq: 0, previous: { epoch: 'a', seq: 5 } }), { kind: 'epoch', at: { epoch: 'b', major: 2, minor: 0 }, continuous: false },
    'the marker says a ended at 5; this reader delivered 2: the streams resync')
  t.same(state.read('3-0', { epoch: 'c', seq: 0, previous: { epoch: 'b', seq: 0 } }), { kind: 'epoch', at: { epoch: 'c', major: 3, minor: 0 }, continuous: true })
  t.same(state.read('4-0', { epoch: 'c', seq: 1 }), { kind: 'next' })
})

t.test('an idle check with the counter or the tail below what was delivered retires the epoch', async (t) => {
  const state = new Continuity()
  state.start('a', 4, '1-0', { id: '7-0', place: { epoch: 'a', seq: 4 } })
  t.notOk(state.mustRotate(4, '7-0'), 'all there')
  t.ok(state.mustRotate(3, '7-0'), 'the counter went back')
  t.ok(state.mustRotate(4, '6-0'), 'the tail went back')
  t.ok(state.mustRotate(4, undefined), 'the stream is gone')
})

t.test('a resume read (judgeRange): up to history.events events replayed, one more is too old; a hole or a short read is lost', async (t) => {
  const maxEvents = 3
  /** Entries `from`..`to` of epoch a (sequence n at stream id n-0), as Redis reads them. */
  const entries = (from: number, to: number): StreamEntry[] =>
    Array.from({ length: to - from + 1 }, (_, i) => [`${from + i}-0`, ['e', 'a', 'n', String(from + i), 'd', `{"n":${from + i}}`]])
  const at = (major: number): EventPosition => ({ epoch: 'a', major, minor: 0 })
  const replayed = (read: ReturnType<typeof judgeRange>): unknown => read.kind === 'events' ? read.events.map((e) => e.data) : read
  t.same(replayed(judgeRange(entries(1, 1 + maxEvents), at(1), at(1 + maxEvents), maxEvents)), ['{"n":2}', '{"n":3}', '{"n":4}'],
    'missed exactly history.events events: every one replayed')
  t.same(judgeRange(entries(1, 2 + maxEvents), at(1), at(2 + maxEvents), maxEvents), { kind: 'gone', reason: 'too-old' }, 'one more: too old, a resync')
  t.same(replayed(judgeRange(entries(4, 4), at(4), at(4), maxEvents)), [], 'missed nothing')
  t.same(judgeRange([...entries(1, 2), ...entries(4, 4)], at(1), at(4), maxEvents), { kind: 'gone', reason: 'lost' }, 'a hole in the sequence')
  t.same(judgeRange(entries(1, 2), at(1), at(3), maxEvents), { kind: 'gone', reason: 'lost' }, 'short of the newest id delivered here')
  t.same(judgeRange(entries(2, 3), at(1), at(3), maxEvents), { kind: 'gone', reason: 'too-old' }, 'the client\'s own entry trimmed')
})
