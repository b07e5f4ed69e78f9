import { mkdirSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import type { Browser, Page } from 'playwright-core'
import { canRunBrowserTests, launchChromium } from './fixtures/browser'
import { ensureClientEsmBuild } from './fixtures/client-esm-build'
import { startRedis } from '../benchmarks/lib/redis-server'
import { connect } from './fixtures/sse-connection'
import { startTower } from './fixtures/tower'
import { runCli } from './fixtures/tower-cli'

const ARTIFACTS = path.resolve(__dirname, '..', 'test-artifacts')
const WAIT_MS = 15_000

/** One instance row as the page shows it. */
interface Row { host: string, pid: string, current: string, accepted: string, rejected: string, bus: string, busState: string }

const rows = (page: Page): Promise<Row[]> => page.locator('#instances tr').evaluateAll((trs) => trs.map((tr) => {
  const text = (selector: string): string => tr.querySelector(selector)?.textContent ?? ''
  return {
    host: text('.instance-host'),
    pid: text('.instance-pid'),
    current: text('.instance-current'),
    accepted: text('.instance-accepted'),
    rejected: text('.instance-rejected'),
    bus: text('.instance-bus'),
    busState: tr.querySelector('.instance-bus .bus-state')?.getAttribute('data-state') ?? ''
  }
}))

/** Waits until the page's instance rows, polled with the stats, satisfy `done`. */
async function rowsUntil (page: Page, what: string, done: (rows: Row[]) => boolean): Promise<Row[]> {
  const deadline = Date.now() + WAIT_MS
  for (;;) {
    const last = await rows(page)
    if (done(last)) return last
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; the page shows ${JSON.stringify(last)}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

async function openDashboard (browser: Browser, port: number, errors: string[]): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } })
  page.on('pageerror', (error) => errors.push(error.message))
  await page.goto(`http://127.0.0.1:${port}`)
  await page.locator('#connection[data-state="open"]').waitFor({ timeout: WAIT_MS })
  return page
}

if (canRunBrowserTests(t)) {
  ensureClientEsmBuild()
  mkdirSync(ARTIFACTS, { recursive: true })
  let browser: Browser
  const pageErrors: string[] = []
  t.before(async () => { browser = await launchChromium() })
  t.teardown(() => browser?.close())

  t.test('with the memory bus the dashboard says memory, up, and shows no instance table', async (t) => {
    const tower = await startTower({ heartbeatMs: 60_000 })
    t.teardown(() => tower.app.close())
    const page = await openDashboard(browser, tower.port, pageErrors)
    t.teardown(() => page.close())
    await page.locator('#bus-state[data-state="up"]').waitFor({ timeout: WAIT_MS })
    t.equal(await page.locator('#bus-kind').textContent(), 'memory')
    t.equal(await page.locator('#bus-state').textContent(), 'up')
    t.equal(await page.locator('#cluster').isHidden(), true, 'one process: no instance table')
  })

  t.test('with Redis the dashboard lists every instance with its streams, shows their entries as text, and says when the bus is down', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const redisKey = 'dashboard'
    // This instance in the test's process (the page's), the other one a CLI process of its own.
    const other = runCli(['--redis', redis.url, '--redis-key', redisKey], { PORT: '0' })
    t.teardown(() => { other.child.kill('SIGKILL') })
    const [tower, otherPort] = await Promise.all([
      startTower({ heartbeatMs: 60_000, redis: { url: redis.url, key: redisKey } }),
      other.line(/tower: listening on/).then((line) => Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(line)?.[1]))
    ])
    t.teardown(() => tower.app.close())
    // Four streams to the other instance, one of them gone again: 3 current, 4 accepted.
    const streams = await Promise.all(Array.from({ length: 4 }, () => connect(otherPort)))
    t.teardown(() => { for (const s of streams) s.destroy() })
    await streams[0].nextEvent(0)
    streams[0].destroy()

    const page = await openDashboard(browser, tower.port, pageErrors)
    t.teardown(() => page.close())
    const thisPid = `pid ${process.pid}`
    const otherPid = `pid ${other.child.pid}`
    const both = await rowsUntil(page, 'both instances with their streams', (r) =>
      r.length === 2 && r[0].pid === thisPid && r[0].current === '1' && r[1].pid === otherPid && r[1].current === '3')
    t.match(both, [
      { pid: thisPid, current: '1', accepted: '1', rejected: '0', bus: 'up', busState: 'up' },
      { pid: otherPid, current: '3', accepted: '4', rejected: '0', bus: 'up', busState: 'up' }
    ], 'this instance first (the page\'s stream), then the other one (3 streams open of 4 accepted)')
    t.equal(await page.locator('#instances tr').first().locator('.instance-this').count(), 1, 'the answering instance is marked')
    t.equal(await page.locator('#bus-kind').textContent(), 'Redis')
    t.equal(await page.locator('#bus-state').getAttribute('data-state'), 'up')
    t.equal(await page.locator('#cluster-note').isHidden(), true)
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-cluster.png'), fullPage: true })
    await page.setViewportSize({ width: 360, height: 800 })
    // The chart follows its box through a ResizeObserver: measure once it has.
    await page.waitForFunction(() => document.documentElement.clientWidth === 360 &&
      (document.querySelector('#chart canvas')?.clientWidth ?? Infinity) <= (document.querySelector('#chart')?.clientWidth ?? 0))
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)
    t.equal(overflow, 0, 'no horizontal scrolling in a 360 px window')
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-cluster-narrow.png'), fullPage: true })

    // Any client of that Redis can write an instance entry: what it says is shown, never run, and
    // an entry that is not one an instance writes is left out rather than failing the stats.
    const markup = '<img src=x onerror="document.title=\'pwned\'">'
    const entries: Record<string, string> = {
      'zz-hostile': JSON.stringify({ id: 'zz-hostile', host: markup, pid: 1, current: 2, peak: 2, accepted: 2, rejected: 0, bus: 'up', seenAt: 0 }),
      'zz-shape': JSON.stringify({ id: 'zz-shape', host: 'h', pid: '<b>1</b>', current: 2, peak: 2, accepted: 2, rejected: 0, bus: 'up', seenAt: 0 }),
      'zz-broken': '{"id": "zz-broken", ',
      'zz-null': 'null'
    }
    for (const [id, value] of Object.entries(entries)) {
      await redis.command('SET', `{${redisKey}}:instance:${id}`, value, 'PX', 60_000)
      await redis.command('SADD', `{${redisKey}}:instances`, id)
    }
    const withHostile = await rowsUntil(page, 'the hostile entry', (r) => r.some((row) => row.host === markup))
    const pids = withHostile.map((row) => row.pid)
    t.same([pids[0], ...pids.slice(1).sort()], [thisPid, ...[otherPid, 'pid 1'].sort()], 'the two instances and the entry of the right shape, nothing else')
    t.equal(await page.locator('#instances img, #instances b').count(), 0, 'no element made from an entry')
    t.not(await page.title(), 'pwned')
    t.equal(await page.locator('#stats-note').isHidden(), true, 'the stats kept answering')
    for (const id of Object.keys(entries)) await redis.command('DEL', `{${redisKey}}:instance:${id}`)

    await redis.kill()
    await page.locator('#bus-state[data-state="down"]').waitFor({ timeout: WAIT_MS })
    t.equal(await page.locator('#bus-state').textContent(), 'down', 'Redis killed: the bus is down')
    const alone = await rowsUntil(page, 'this instance alone', (r) => r.length === 1)
    t.match(alone, [{ pid: thisPid, bus: 'down', busState: 'down' }], 'only this instance, its bus down: Redis cannot be read')
    t.equal(await page.locator('#cluster-note').isVisible(), true, 'and the page says why')
    t.same(pageErrors, [], 'no uncaught error in any page')
  })
}
