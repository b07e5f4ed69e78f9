import { withTestClocks } from '../lib/testing'
import t from 'tap'
import { RedisBus } from '../lib/bus/redis/redis-bus'
import { DEFAULTS } from '../lib/options'
import { startRedis } from '../benchmarks/lib/redis-server'
import { StormMeter } from '../lib/admission/storm-meter'
import { TokenBucket } from '../lib/admission/token-bucket'
import { startApp } from './fixtures/app'
import { frozenClock, steppedWallClock } from './fixtures/moved-clock'
import { connect, waitFor } from './fixtures/sse-connection'

// A wall clock stepped back (issue 31, item 4) is not a storm nor a debt of tokens: a backward
// step of 10 min had put the storm level at 593 and answered Retry-After 565 s. And `retry:` stays
// within maxRetryAfterSeconds however stormy (it reached 119 s against a 60 s cap).

const TEN_MINUTES = 600_000

t.test('the storm meter: a clock stepped back 10 min changes no level', async (t) => {
  const meter = new StormMeter(2, 4)
  for (const at of [10_000, 10_100, 10_200]) meter.recordRefusal(at)
  t.equal(meter.levelAt(11_000), 1, 'a stormy second: level 1')
  meter.recordRefusal(11_000)
  const back = 11_000 - TEN_MINUTES
  t.equal(meter.levelAt(back), 1, 'read after the step: unchanged')
  t.equal(meter.scale(back), 2, 'and what admission would use: unchanged')
  t.equal(meter.isStorm(back + 10), true)
  t.equal(meter.levelAt(back + 1000), 0, 'then a calm second lowers it as usual')
})

t.test('the token bucket: a clock stepped back 10 min owes no tokens', async (t) => {
  const bucket = new TokenBucket(1, 1, 0)
  t.equal(bucket.take(0), true)
  t.equal(bucket.take(-TEN_MINUTES), false, 'no token refilled by going back')
  t.equal(bucket.secondsUntilToken(), 1, 'Retry-After: the next token, not 600 s')
  t.equal(bucket.take(-TEN_MINUTES + 1000), true, 'a second later, one token')
})

t.test('a wall clock stepped 10 min back or forward changes no storm level, Retry-After or retry: (a real server)', async (t) => {
  const clock = frozenClock()
  const wall = steppedWallClock(t)
  // random at its top: every jitter draws its highest value, so a cap that does not hold shows.
  const { app, port } = await startApp(withTestClocks({ maxClients: 1, retryMs: 5000, retryAfterSeconds: 5, storm: { maxRetryAfterSeconds: 20, refusalsPerSecond: 2, tarpitMs: 0 } }, { random: () => 0.9999, monotonicNow: clock.now }))
  t.teardown(() => app.close())
  const holder = await connect(port)
  const refusal = async (): Promise<number> => {
    const refused = await connect(port)
    await refused.ended
    t.equal(refused.status, 503)
    return Number(refused.headers['retry-after'])
  }
  for (let second = 0; second < 4; second++) {
    for (let i = 0; i < 10; i++) await refusal()
    clock.skip(1000)
  }
  const level = app.sse.stats().stormLevel
  t.ok(level >= 2, `a storm (level ${level})`)
  for (const [step, what] of [[-TEN_MINUTES, 'back 10 min'], [2 * TEN_MINUTES, 'then 10 min ahead'], [-TEN_MINUTES, 'then back to true time']] as const) {
    wall.step(step)
    t.equal(app.sse.stats().stormLevel, level, `${what}: the storm level is unchanged`)
    t.equal(await refusal(), 20, `${what}: Retry-After is the 20 s cap, still widened`)
  }
  holder.destroy()
  await waitFor('slot free', () => app.sse.size === 0)
  wall.step(TEN_MINUTES)
  const stream = await connect(port)
  await waitFor('retry frame', () => stream.retries.length === 1)
  t.ok(stream.retries[0] <= 20_000, `retry: ${stream.retries[0]} ms within the 20 s cap`)
  t.ok(stream.retries[0] > 10_000, 'and still widened by the storm')
  stream.destroy()
})

t.test('the connect-rate bucket follows the monotonic clock, not the wall clock (a real server)', async (t) => {
  const clock = frozenClock()
  const wall = steppedWallClock(t)
  const { app, port } = await startApp(withTestClocks({ connectRate: { perSecond: 1, burst: 1 }, storm: { maxRetryAfterSeconds: 20 } }, { random: () => 0.9999, monotonicNow: clock.now }))
  t.teardown(() => app.close())
  const admitted = await connect(port)
  t.equal(admitted.status, 200, 'the burst\'s one token')
  admitted.destroy()
  for (const [step, what] of [[TEN_MINUTES, '10 min ahead'], [-2 * TEN_MINUTES, '10 min back']] as const) {
    wall.step(step)
    const refused = await connect(port)
    await refused.ended
    t.equal(refused.status, 503, `${what}: no token refilled by the step`)
    const seconds = Number(refused.headers['retry-after'])
    t.ok(seconds >= 1 && seconds <= 20, `${what}: Retry-After ${seconds} s within the cap`)
  }
  clock.skip(1000)
  const next = await connect(port)
  t.equal(next.status, 200, 'a second later on the monotonic clock, a token')
  next.destroy()
})

t.test('rejectWith retry: the refused stream\'s retry: never passes maxRetryAfterSeconds', async (t) => {
  // Retry-After at the cap itself: the retry: drawn around it must stay below.
  const { app, port } = await startApp(withTestClocks({ maxClients: 1, rejectWith: 'retry', retryAfterSeconds: 20, storm: { maxRetryAfterSeconds: 20, tarpitMs: 0 } }, { random: () => 0.9999 }))
  t.teardown(() => app.close())
  const holder = await connect(port)
  t.teardown(() => holder.destroy())
  const refused = await connect(port)
  await refused.ended
  t.equal(refused.status, 200)
  t.equal(refused.retries.length, 1)
  t.ok(refused.retries[0] <= 20_000 && refused.retries[0] >= 19_000, `retry: ${refused.retries[0]} ms: jittered, under the 20 s cap`)
})

t.test('bus lag: an instance whose clock is 10 min ahead reports the lag in Redis\'s clock, not 600 s', async (t) => {
  const redis = await startRedis()
  t.teardown(() => redis.stop())
  const { publishTimeoutMs, maxPendingPublishes } = DEFAULTS.redis
  const { idempotencyWindowMs } = DEFAULTS.history
  const bus = new RedisBus({ connection: redis.url, key: 'ahead', historyEvents: 10, publishTimeoutMs, maxPendingPublishes, idempotencyWindowMs, random: Math.random, log: { warn: () => {}, info: () => {} }, now: () => Date.now() + TEN_MINUTES })
  t.teardown(() => bus.close())
  await bus.subscribe(() => 0, () => {})
  await bus.publish({ data: '1' })
  t.ok(bus.stats().lagMs < 5000, `lag ${bus.stats().lagMs} ms`)
})
