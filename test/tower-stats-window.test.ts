import t from 'tap'
import { StatsWindow } from '../lib/tower/stats-window'

/** Plugin-like counters and a clock the test moves by hand. */
function fixture (seconds?: number): { counters: { accepted: number, rejected: number }, clock: { now: number }, window: StatsWindow } {
  const counters = { accepted: 5, rejected: 2 }
  const clock = { now: 1_000_000 }
  const window = new StatsWindow(() => counters, seconds, () => clock.now)
  return { counters, clock, window }
}

t.test('each sample holds the connects and rejects since the previous one', async (t) => {
  const { counters, clock, window } = fixture()
  t.same(window.snapshot(), { lastMinute: { connects: 0, rejects: 0 }, perSecond: [] }, 'counts before the window opened are not counted')
  counters.accepted += 3
  counters.rejected += 1
  clock.now += 1000
  window.sample()
  counters.accepted += 1
  clock.now += 1000
  window.sample()
  t.same(window.snapshot().perSecond, [
    { t: 1_001_000, connects: 3, rejects: 1 },
    { t: 1_002_000, connects: 1, rejects: 0 }
  ])
  t.same(window.snapshot().lastMinute, { connects: 4, rejects: 1 })
})

t.test('lastMinute includes what happened since the last sample', async (t) => {
  const { counters, window } = fixture()
  window.sample()
  counters.accepted += 2
  counters.rejected += 7
  t.same(window.snapshot().lastMinute, { connects: 2, rejects: 7 })
  t.same(window.snapshot().perSecond, [{ t: 1_000_000, connects: 0, rejects: 0 }], 'the series only has whole sampled seconds')
})

t.test('the series keeps the last 60 seconds; lastMinute the newest 59 plus the current one', async (t) => {
  const { counters, clock, window } = fixture()
  for (let second = 1; second <= 75; second++) {
    counters.accepted += second
    counters.rejected += 1
    clock.now += 1000
    window.sample()
  }
  counters.accepted += 100
  const { perSecond, lastMinute } = window.snapshot()
  t.equal(perSecond.length, 60)
  t.same(perSecond[0], { t: 1_016_000, connects: 16, rejects: 1 }, 'oldest kept: second 16')
  t.same(perSecond[59], { t: 1_075_000, connects: 75, rejects: 1 }, 'newest: second 75')
  // Seconds 17..75 (59 samples) plus the 100 connects since the last sample.
  t.same(lastMinute, { connects: (17 + 75) * 59 / 2 + 100, rejects: 59 })
})

t.test('a snapshot is a copy: changing it does not change the window', async (t) => {
  const { counters, window } = fixture()
  counters.accepted += 1
  window.sample()
  window.snapshot().perSecond[0].connects = 99
  t.equal(window.snapshot().perSecond[0].connects, 1)
})

t.test('a one-second window counts only what happened since the last sample', async (t) => {
  const { counters, window } = fixture(1)
  counters.rejected += 4
  window.sample()
  counters.rejected += 1
  t.same(window.snapshot(), { lastMinute: { connects: 0, rejects: 1 }, perSecond: [{ t: 1_000_000, connects: 0, rejects: 4 }] })
})

t.test('the window length must be a whole number of seconds', async (t) => {
  for (const bad of [0, -1, 1.5, Number.NaN]) {
    t.throws(() => fixture(bad), { code: 'TOWER_STATS_WINDOW', message: /seconds must be an integer >= 1/ }, String(bad))
  }
})
