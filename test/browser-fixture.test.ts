import t from 'tap'
import { hasChromium } from './fixtures/browser'

t.test('a missing browser skips browser tests outside CI and fails them under CI', async (t) => {
  const missing = '/nonexistent/chromium'
  t.equal(hasChromium(missing, {}), false, 'outside CI: skipped, with the reason')
  t.equal(hasChromium(missing, { CI: 'false' }), false)
  t.throws(() => hasChromium(missing, { CI: 'true' }), /no browser at \/nonexistent\/chromium: install/, 'under CI: an error, not a 0-test pass')
  t.equal(hasChromium(process.execPath, { CI: 'true' }), true, 'a browser that is there runs')
})
