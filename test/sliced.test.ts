import t from 'tap'
import { inSlices } from '../lib/shared/slices'

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

t.test('a pass over many items runs one slice per turn of the event loop, in order, then says it is done', async (t) => {
  const items = Array.from({ length: 2500 }, (_, i) => i)
  const seen: number[] = []
  let done = 0
  inSlices(items, 1000, (n) => seen.push(n), () => done++)
  const counts = [seen.length]
  for (let i = 0; i < 3; i++) {
    await turn()
    counts.push(seen.length)
  }
  t.same(counts, [1000, 2000, 2500, 2500], 'the first slice at once, then one a turn')
  t.same(seen, items, 'every item once, in order')
  t.equal(done, 1)
})

t.test('fewer items than a slice: all at once, done at once', async (t) => {
  let done = false
  const seen: string[] = []
  inSlices(['a', 'b'], 1000, (s) => seen.push(s), () => { done = true })
  t.same([seen, done], [['a', 'b'], true])
})

t.test('cancelled after the first slice: nothing more runs and it is never done', async (t) => {
  const seen: number[] = []
  let done = false
  const cancel = inSlices(Array.from({ length: 3000 }, (_, i) => i), 1000, (n) => seen.push(n), () => { done = true })
  cancel?.()
  for (let i = 0; i < 4; i++) await turn()
  t.same([seen.length, done], [1000, false])
})
