import t from 'tap'
import { canRunBrowserTests } from './fixtures/browser'
import { ensureClientEsmBuild } from './fixtures/client-esm-build'
import { shareAndHandOver, WAIT_MS } from './fixtures/dashboard-tabs'

if (canRunBrowserTests(t)) {
  ensureClientEsmBuild()
  t.test('without Web Locks (heartbeat lease): 4 tabs share one stream; a leader close and a crash are detected', async (t) => {
    const handOverMs = await shareAndHandOver(t, 4, ['close', 'crash'], true)
    t.ok(handOverMs.every((ms) => ms < WAIT_MS), 'every hand-over completed')
  })
}
