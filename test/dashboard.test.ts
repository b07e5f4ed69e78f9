import { mkdirSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import type { Browser, Page } from 'playwright-core'
import { canRunBrowserTests, launchChromium } from './fixtures/browser'
import { ensureClientEsmBuild } from './fixtures/client-esm-build'
import { waitFor } from './fixtures/sse-connection'
import type { TestApp } from './fixtures/app'
import { notify, startTower } from './fixtures/tower'

const ARTIFACTS = path.resolve(__dirname, '..', 'test-artifacts')

async function sendNotification (port: number, notification: Record<string, string>): Promise<void> {
  const response = await notify(port, notification)
  if (response.status !== 200) throw new Error(`notify answered ${response.status}: ${response.body}`)
}

/** Opens the dashboard in its own browser context, collecting uncaught page errors. */
async function openDashboard (browser: Browser, base: string, errors: string[]): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } })
  page.on('pageerror', (error) => errors.push(error.message))
  await page.goto(base)
  return page
}

const connectionState = (page: Page): Promise<string | null> =>
  page.locator('#connection').getAttribute('data-state')

if (canRunBrowserTests(t)) {
  ensureClientEsmBuild()
  mkdirSync(ARTIFACTS, { recursive: true })
  let browser: Browser
  let tower: TestApp
  let base: string
  const pageErrors: string[] = []
  t.before(async () => {
    // One stream at a time, so a second page meets a full server; refusals say "retry after 1-2 s".
    [browser, tower] = await Promise.all([launchChromium(), startTower({ maxClients: 1, retryAfterSeconds: 1, heartbeatMs: 60_000 })])
    base = `http://127.0.0.1:${tower.port}`
  })
  t.teardown(async () => {
    await browser?.close()
    await tower?.app.close()
  })

  let first: Page
  t.test('the dashboard shows notifications as they arrive, the client count and the chart', async (t) => {
    first = await openDashboard(browser, base, pageErrors)
    await first.locator('#connection[data-state="open"]').waitFor({ timeout: 10_000 })
    t.equal(await first.locator('#connection').textContent(), 'Live')

    await sendNotification(tower.port, { type: 'build', title: 'Build passed', body: 'tower-sse main: all tests green', workspace: 'tower-sse' })
    await sendNotification(tower.port, { type: 'review', title: '<img src=x onerror=alert(1)>', body: 'line one\nline two' })
    const items = first.locator('#notifications .notification')
    await items.nth(1).waitFor({ timeout: 10_000 })
    t.same(await items.locator('.title').allTextContents(), ['<img src=x onerror=alert(1)>', 'Build passed'],
      'newest first; markup in a field is shown as text, never run')
    t.equal(await items.nth(1).locator('.workspace').textContent(), 'tower-sse')
    t.equal(await items.nth(0).locator('.body').textContent(), 'line one\nline two')
    t.equal(await first.locator('#empty').isHidden(), true)

    await first.locator('#clients', { hasText: '1' }).waitFor({ timeout: 10_000 })
    t.equal(await first.locator('#capacity').textContent(), ' / 1')
    t.equal(await first.locator('#connects').textContent(), '1', 'one connect in the last minute')
    t.equal(await first.locator('#chart canvas').count(), 1, 'uPlot drew its canvas')
    // Two more polls so the chart has a few seconds of data, then look at it.
    for (let poll = 0; poll < 2; poll++) await first.waitForResponse((response) => new URL(response.url()).pathname === '/api/events/stats', { timeout: 10_000 })
    await first.screenshot({ path: path.join(ARTIFACTS, 'dashboard.png'), fullPage: true })

    await first.setViewportSize({ width: 360, height: 800 })
    // The chart follows its box through a ResizeObserver: measure once it has.
    await first.waitForFunction(() => {
      const box = document.getElementById('chart')
      return box !== null && (box.querySelector('canvas')?.getBoundingClientRect().width ?? Infinity) <= box.clientWidth
    }, undefined, { timeout: 10_000 })
    const overflow = await first.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)
    t.equal(overflow, 0, 'no horizontal scrolling in a 360 px window')
    await first.screenshot({ path: path.join(ARTIFACTS, 'dashboard-narrow.png'), fullPage: true })
  })

  t.test('at capacity a second dashboard says it is waiting, retries per Retry-After, and connects when a slot frees', async (t) => {
    const refusedBefore = tower.app.sse.stats().rejected
    const startedAt = Date.now()
    const second = await openDashboard(browser, base, pageErrors)
    const status = second.locator('#connection')
    await second.locator('#connection[data-state="waiting"]').waitFor({ timeout: 10_000 })
    t.match(await status.textContent(), /^Server full — retrying in [1-3] s$/, 'it says why it waits and for how long')

    // Where a bare EventSource gives up for good, it tries again: never faster than one attempt
    // per Retry-After (at least 1 s).
    await waitFor('two retries, both refused', () => tower.app.sse.stats().rejected - refusedBefore >= 3, 10_000)
    // The server counts a refusal before the page has read it: wait for the page to take it in.
    await second.locator('#connection[data-state="waiting"]').waitFor({ timeout: 5_000 })
    t.equal(await connectionState(second), 'waiting', 'still waiting, not given up')
    const refused = tower.app.sse.stats().rejected - refusedBefore
    const elapsedSeconds = (Date.now() - startedAt) / 1000
    t.ok(refused <= Math.floor(elapsedSeconds) + 1, `${refused} refusals in ${elapsedSeconds.toFixed(1)} s: at most one per Retry-After window`)
    await second.locator('#rejects', { hasNotText: /^0$/ }).waitFor({ timeout: 10_000 })
    t.pass('the refusals show in the stats')
    await second.screenshot({ path: path.join(ARTIFACTS, 'dashboard-waiting.png'), fullPage: true })

    await first.close()
    await second.locator('#connection[data-state="open"]').waitFor({ timeout: 10_000 })
    t.equal(await status.textContent(), 'Live', 'recovered from 503 once the first page left')
    await sendNotification(tower.port, { type: 'deploy', title: 'Deployed', body: 'to staging' })
    await second.locator('.notification .title', { hasText: 'Deployed' }).waitFor({ timeout: 10_000 })
    t.pass('and it receives notifications')
    t.same(pageErrors, [], 'no uncaught error in any page')
  })
}
