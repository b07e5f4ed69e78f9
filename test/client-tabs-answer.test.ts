// Two Chromium tabs (Web Locks) share one per-request answer: the leader's stream ends with
// `event: end`, and both tabs get it and close. The Node run of the same relay, with a 204 and the
// server's own error too, is in client-tabs.test.ts.
import type { AddressInfo } from 'node:net'
import t from 'tap'
import type { Page } from 'playwright-core'
import { buildTower } from '../lib/tower/app'
import { canRunBrowserTests, launchChromium } from './fixtures/browser'
import { ensureClientEsmBuild } from './fixtures/client-esm-build'

const WAIT_MS = 15_000

interface TabOutcome { role: string, seen: string[], readyState: number, state: unknown }

if (canRunBrowserTests(t)) {
  ensureClientEsmBuild()
  t.test('two tabs share an answer: the leader\'s stream ends with `end`, both tabs get it and close', async (t) => {
    let release!: () => void
    const released = new Promise<void>((resolve) => { release = resolve })
    const answers: string[] = []
    const tower = buildTower({ sse: { heartbeatMs: 60_000, retryMs: 50 }, logger: false })
    void tower.register(async (scope) => {
      scope.get('/answer', { eventStream: true }, (request, reply) => {
        answers.push(request.url)
        return reply.eventStream.subscribe({
          // Held until both tabs are there: a tab that joins later gets only what comes after it.
          stream: (async function * () {
            await released
            yield { data: 'token 0' }
            yield { data: 'token 1' }
          })()
        })
      })
    })
    await tower.listen({ host: '127.0.0.1', port: 0 })
    const browser = await launchChromium()
    t.teardown(async () => {
      await browser.close()
      await tower.close()
    })
    const context = await browser.newContext()
    const errors: string[] = []
    const pages: Page[] = []
    for (let i = 0; i < 2; i++) {
      const page = await context.newPage()
      page.on('pageerror', (error) => errors.push(error.message))
      await page.goto(`http://127.0.0.1:${(tower.server.address() as AddressInfo).port}/`)
      // A string: the test's own transform would rewrite an import() inside a function.
      await page.evaluate(`(async () => {
        const { TowerSseClient, TowerSseErrorEvent } = await import('/vendor/tower-sse-client/index.js')
        const client = new TowerSseClient('/answer', { minRetryMs: 0 })
        const seen = []
        // Tower greets every stream with a "connected" message: a tab that joined after it never saw it.
        client.addEventListener('message', (event) => { if (!event.data.startsWith('{"type":"connected"')) seen.push(event.data) })
        client.addEventListener('end', (event) => seen.push(event instanceof MessageEvent ? 'end:' + event.data : 'end (no data)'))
        client.addEventListener('error', (event) => seen.push(event instanceof TowerSseErrorEvent ? 'client error ' + event.code : 'error:' + event.data))
        globalThis.answer = { client, seen }
      })()`)
      pages.push(page)
    }
    const outcome = (page: Page): Promise<TabOutcome> => page.evaluate(`(() => {
      const { client, seen } = globalThis.answer
      return { role: client.tabRole, seen: [...seen], readyState: client.readyState, state: client.state }
    })()`)
    for (const page of pages) await page.waitForFunction('globalThis.answer.client.readyState === 1', undefined, { timeout: WAIT_MS })
    t.same((await Promise.all(pages.map(outcome))).map((o) => o.role).sort(), ['follower', 'leader'], 'one leader holds the stream')
    release()
    for (const page of pages) await page.waitForFunction('globalThis.answer.client.readyState === 2', undefined, { timeout: WAIT_MS })
    const outcomes = await Promise.all(pages.map(outcome))
    t.same(outcomes.map((o) => o.seen), [['token 0', 'token 1', 'end:{}'], ['token 0', 'token 1', 'end:{}']], 'both tabs: the tokens, then `end`')
    t.same(outcomes.map((o) => o.state), [{ kind: 'closed', error: null }, { kind: 'closed', error: null }], 'both tabs closed as done')
    // A window many times the server's retry: (50 ms) in which a reconnect would have come: a count, not a speed.
    await new Promise((resolve) => setTimeout(resolve, 400))
    t.same(answers, ['/answer'], 'one request, by the leader; none after the end')
    t.same(errors, [], 'no uncaught error in either page')
  })
}
