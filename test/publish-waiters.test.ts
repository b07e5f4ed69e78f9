import t from 'tap'
import { PublishWaiters } from '../lib/bus/redis/publish-waiters'

// A publish's outcome, decided in one place: each publish settles once, with what was known then.

t.test('a publish settles once: the first word wins, later ones change nothing', async (t) => {
  const waiters = new PublishWaiters(60_000)
  const published = waiters.wait('a')
  waiters.answered('a', ['ok', 'ep', '5-0', '1'])
  waiters.delivered('a', 'ep-5-0', 3)
  waiters.passedUpTo({ epoch: 'ep', major: 9, minor: 0 })
  waiters.failed('a', new Error('late word'))
  t.same(await published, { id: 'ep-5-0', delivered: 3 })
  t.equal(waiters.size, 0)
})

t.test('what Redis has but this instance will not deliver is published, with the id Redis gave it', async (t) => {
  const waiters = new PublishWaiters(60_000)
  const passed = waiters.wait('a')
  const otherEpoch = waiters.wait('b')
  const notYetAnswered = waiters.wait('c')
  waiters.answered('a', ['ok', 'ep', '5-0', '1'])
  waiters.answered('b', ['ok', 'old', '7-0', '1'])
  waiters.passedUpTo({ epoch: 'ep', major: 5, minor: 0 })
  t.equal(waiters.size, 2, 'the resync at 5 passed the publish at 5, and only it')
  waiters.leftFor('ep')
  t.same(await passed, { id: 'ep-5-0', delivered: 0 }, 'a resync at its position passed it')
  t.same(await otherEpoch, { id: 'old-7-0', delivered: 0 }, 'its epoch was left')
  t.equal(waiters.size, 1, 'one Redis has not answered for stays')
  waiters.close()
  await t.rejects(notYetAnswered, { code: 'TOWER_SSE_BUS_CLOSED' })
})

t.test('refused: too late, or an error Redis sent; unknown: no word from Redis by the deadline, or a lost connection', async (t) => {
  const waiters = new PublishWaiters(1)
  const late = waiters.wait('late')
  const error = waiters.wait('error')
  const lost = waiters.wait('lost')
  const silent = waiters.wait('silent')
  const duplicate = waiters.wait('dup')
  waiters.answered('late', ['late'])
  waiters.failed('error', Object.assign(new Error('NOSCRIPT'), { name: 'ReplyError' }))
  waiters.failed('lost', new Error('Connection is closed.'))
  waiters.answered('dup', ['dup', 'ep-1-0'])
  await t.rejects(late, { code: 'TOWER_SSE_BUS_UNAVAILABLE', message: /after its deadline/ })
  await t.rejects(error, { code: 'TOWER_SSE_BUS_UNAVAILABLE', message: /NOSCRIPT/ })
  await t.rejects(lost, { code: 'TOWER_SSE_PUBLISH_UNKNOWN' })
  await t.rejects(silent, { code: 'TOWER_SSE_PUBLISH_UNKNOWN' })
  t.same(await duplicate, { id: 'ep-1-0', delivered: 0 })
})

t.test('at the deadline, a publish Redis gave an id is published, not unknown', async (t) => {
  const waiters = new PublishWaiters(1)
  const published = waiters.wait('a')
  waiters.answered('a', ['ok', 'ep', '5-0', '1'])
  t.same(await published, { id: 'ep-5-0', delivered: 0 })
})
