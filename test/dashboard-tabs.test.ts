import t from 'tap'
import { canRunBrowserTests } from './fixtures/browser'
import { ensureClientEsmBuild } from './fixtures/client-esm-build'
import { shareAndHandOver, WAIT_MS } from './fixtures/dashboard-tabs'

const TABS = 8

if (canRunBrowserTests(t)) {
  ensureClientEsmBuild()
  t.test(`${TABS} dashboard tabs share one stream (Web Locks); the leader closes 3 times, then crashes: no tab loses or repeats a notification`, async (t) => {
    const handOverMs = await shareAndHandOver(t, TABS, ['close', 'close', 'close', 'crash'], false)
    t.ok(handOverMs.every((ms) => ms < WAIT_MS), 'every hand-over completed')
  })
}
