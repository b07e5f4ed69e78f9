import fc from 'fast-check'
import t from 'tap'
import { TokenBucket } from '../lib/admission/token-bucket'

t.test('a burst at once, then ratePerSecond, on an injected clock', async (t) => {
  const bucket = new TokenBucket(10, 5, 0)
  const takes = (now: number, n: number): number => Array.from({ length: n }, () => bucket.take(now)).filter(Boolean).length
  t.equal(takes(0, 20), 5, 'the burst')
  t.equal(bucket.secondsUntilToken(), 1)
  t.equal(takes(50, 5), 0, 'half a token after 50 ms')
  t.equal(takes(100, 5), 1, 'one token per 100 ms at 10/s')
  t.equal(takes(1100, 20), 5, 'a long quiet spell refills only up to the burst')
})

t.test('never holds more than its burst, and never admits more than burst + rate × time', async () => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 50 }),
    fc.integer({ min: 1, max: 50 }),
    fc.array(fc.integer({ min: 0, max: 2000 }), { maxLength: 200 }),
    (rate, burst, gaps) => {
      const bucket = new TokenBucket(rate, burst, 0)
      let now = 0
      let admitted = 0
      for (const gap of gaps) {
        now += gap
        // Drain what is there: at most `burst` in any one instant (one take more would show a bucket that never empties).
        let atOnce = 0
        while (atOnce <= burst && bucket.take(now)) atOnce++
        if (atOnce > burst) return false
        admitted += atOnce
      }
      return admitted <= burst + Math.floor(now * rate / 1000)
    }
  ))
})

t.test('secondsUntilToken: whole seconds, at least one', async (t) => {
  const bucket = new TokenBucket(1, 1, 0)
  bucket.take(0)
  t.equal(bucket.secondsUntilToken(), 1)
  const slow = new TokenBucket(2, 3, 0)
  for (let i = 0; i < 3; i++) slow.take(0)
  t.equal(slow.secondsUntilToken(), 1, '0.5 s rounds up to 1')
  t.equal(new TokenBucket(1, 3, 0).secondsUntilToken(), 1, 'a token already there still says 1, never 0 (Retry-After: 0 would mean at once)')
})

t.test('a second on a fractional clock refills a whole token (float subtraction falls short of 1000 ms)', async (t) => {
  // 4298.015275 − 3298.015275 is 999.9999999999996: a clock read as performance.now() gives such pairs.
  const bucket = new TokenBucket(1, 1, 3298.015275)
  t.equal(bucket.take(3298.015275), true, 'the burst')
  t.equal(bucket.take(3298.015275), false)
  t.equal(bucket.take(4298.015275), true, 'one second later, one token')
  t.equal(bucket.take(4298.015275), false, 'and only one')
})
