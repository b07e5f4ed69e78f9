import t from 'tap'
import { StormMeter } from '../lib/admission/storm-meter'

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

const refuse = (meter: StormMeter, second: number, count: number): void => {
  for (let i = 0; i < count; i++) meter.recordRefusal(second * 1000 + i)
}

t.test('a second above the threshold is a storm; each such second doubles the scale up to the bound', async (t) => {
  const meter = new StormMeter(5, 2)
  refuse(meter, 10, 5)
  t.equal(meter.isStorm(10_900), false, 'at the threshold: calm')
  t.equal(meter.scale(10_900), 1)
  meter.recordRefusal(10_950)
  t.equal(meter.isStorm(10_960), true, 'past it: a storm within the same second')
  t.equal(meter.scale(10_960), 1, 'the level rises only when the second is over')
  refuse(meter, 11, 6)
  t.equal(meter.scale(11_999), 2)
  refuse(meter, 12, 6)
  t.equal(meter.scale(12_999), 4)
  refuse(meter, 13, 6)
  t.equal(meter.scale(13_999), 4, 'bounded by maxLevel')
})

t.test('calm seconds lower the level one per second, quiet gaps all at once', async (t) => {
  const meter = new StormMeter(0, 5)
  for (let s = 0; s < 4; s++) refuse(meter, s, 1)
  t.equal(meter.scale(4000), 16, 'four stormy seconds')
  t.equal(meter.isStorm(4000), true, 'the level alone keeps it a storm')
  t.equal(meter.scale(5000), 8, 'one calm second')
  t.equal(meter.scale(8000), 1, 'three quiet seconds later, calm')
  t.equal(meter.isStorm(8000), false)
})

t.test('a stormy second followed by a gap does not raise the level', async (t) => {
  const meter = new StormMeter(0, 5)
  refuse(meter, 0, 3)
  t.equal(meter.scale(3000), 1, 'the stormy second ended long ago')
})
