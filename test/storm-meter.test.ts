import t from 'tap'
import { StormMeter } from '../lib/storm-meter'

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
