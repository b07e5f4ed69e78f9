import t from 'tap'
import { StormMeter } from '../lib/storm-meter'

/** Refusals at these ms timestamps: four in each of seconds 10, 11 and 12, one at 15.5 s, none after. */
const REFUSALS = [10_000, 10_100, 10_200, 10_300, 11_000, 11_100, 11_200, 11_300, 12_000, 12_100, 12_200, 12_300, 15_500]

t.test('the level read for metrics is what admission would use, and reading it changes nothing', async (t) => {
  const read = new StormMeter(2, 6)
  const unread = new StormMeter(2, 6)
  const levels: Array<[number, number]> = []
  for (const at of REFUSALS) {
    // The read meter is looked at (as a scrape would) every 250 ms up to each refusal.
    const last = levels.length === 0 ? at - 250 : levels[levels.length - 1][0]
    for (let now = last + 250; now <= at; now += 250) levels.push([now, read.levelAt(now)])
    read.recordRefusal(at)
    unread.recordRefusal(at)
  }
  t.same(levels.filter(([now]) => [10_000, 11_000, 12_000, 13_000, 13_750].includes(now)).map(([, level]) => level),
    [0, 1, 2, 3, 3], 'each stormy second raises the level the second after')
  for (const now of [15_500, 15_900, 16_000, 16_500, 17_000, 20_000]) {
    t.equal(read.levelAt(now), unread.levelAt(now), `level at ${now} ms`)
    t.equal(read.scale(now), unread.scale(now), `and the delays handed out at ${now} ms`)
  }
})
