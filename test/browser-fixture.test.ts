import t from 'tap'
import { canRunBrowserTests } from './fixtures/browser'

t.test('without chromium, browser tests are skipped on a workstation and fail under CI=true', async (t) => {
  const calls: string[] = []
  const recorder = { plan: (n: number, why: string) => calls.push(`plan ${n}: ${why}`), fail: (why: string) => calls.push(`fail: ${why}`) }
  t.equal(canRunBrowserTests(recorder, '/no/such/chromium', {}), false)
  t.equal(canRunBrowserTests(recorder, '/no/such/chromium', { CI: 'true' }), false)
  t.match(calls, [/^plan 0: no browser at \/no\/such\/chromium: install/, /^fail: no browser at \/no\/such\/chromium.*CI=true/])
  t.equal(canRunBrowserTests(recorder, process.execPath, { CI: 'true' }), true, 'a browser that exists runs')
  t.equal(calls.length, 2)
})
