// The client's browser ES module build under Bun and Deno (both from npm) and in a Chromium page: a
// POST stream resumed with its body and Last-Event-ID, a 401 refreshed through headers() +
// onResponse, and a `break` that closes the stream (so the runtime exits by itself). Node runs the
// same features in client-request.test.ts.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import t, { type Test } from 'tap'
import { canRunBrowserTests, launchChromium } from './fixtures/browser'
import { ensureClientEsmBuild } from './fixtures/client-esm-build'
import { startScriptedServer, type ScriptedServer } from './fixtures/client-scripted-server'
import { startTower } from './fixtures/tower'

const ROOT = path.join(__dirname, '..')
const SCENARIO = path.join(__dirname, 'fixtures', 'client-runtime-scenario.mjs')
const BUILD = pathToFileURL(path.join(ROOT, 'dist', 'client-esm', 'client', 'index.js')).href

const RUNTIMES = {
  bun: [path.join(ROOT, 'node_modules', '.bin', 'bun'), SCENARIO],
  deno: [path.join(ROOT, 'node_modules', '.bin', 'deno'), 'run', '--allow-net=127.0.0.1', '--allow-read', '--no-prompt', SCENARIO]
}

interface Outcome {
  post: { data: string[], readyState: number }
  auth: { first: string, errors: Array<[string, number | null, boolean]> }
  held: { seen: string[], readyState: number }
}

/** The scenario's three servers: two POST streams that end then a held one, a 401 until the token is "new", a held stream. */
async function startServers (t: Test, cors: boolean): Promise<ScriptedServer[]> {
  const servers = await Promise.all([
    startScriptedServer((n) => n < 2 ? { frames: [`id: p${n}\ndata: p${n}\n\n`], then: 'end' } : { frames: [], then: 'hold' }, { cors }),
    startScriptedServer((_n, request) => request.headers.authorization === 'Bearer new'
      ? { frames: ['data: welcome\n\n'], then: 'hold' }
      : { status: 401, body: 'expired' }, { cors }),
    startScriptedServer(() => ({ frames: ['data: only\n\n'], then: 'hold' }), { cors })
  ])
  t.teardown(() => Promise.all(servers.map((server) => server.close())))
  return servers
}

function judge (t: Test, outcome: Outcome, [post, auth]: ScriptedServer[]): void {
  t.same(outcome.post, { data: ['p0', 'p1'], readyState: 2 }, 'both events, then CLOSED by the break')
  t.same(post.requests.slice(0, 2).map((r) => [r.method, r.body, r.headers['last-event-id']]), [['POST', 'prompt=hi', undefined], ['POST', 'prompt=hi', 'p0']],
    'the body sent again, resumed after p0')
  t.same(outcome.auth, { first: 'welcome', errors: [['TOWER_SSE_CLIENT_HTTP', 401, false]] }, 'the 401 retried once with the refreshed token')
  t.same(auth.requests.map((r) => [r.headers.authorization, r.headers['x-attempt']]), [['Bearer old', '1'], ['Bearer new', '2']])
  t.same(outcome.held, { seen: ['only'], readyState: 2 })
}

ensureClientEsmBuild()

for (const [name, [command, ...args]] of Object.entries(RUNTIMES)) {
  t.test(`${name}: method and body, headers() with onResponse, break closes`, async (t) => {
    const servers = await startServers(t, false)
    const child = spawn(command, [...args, BUILD, ...servers.map((server) => server.url)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } })
    let out = ''
    let err = ''
    child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
    child.stderr.on('data', (chunk: Buffer) => { err += chunk.toString() })
    // Bounded: a stream left open keeps the runtime alive, and the test then fails instead of hanging.
    const killer = setTimeout(() => child.kill('SIGKILL'), 20_000)
    const [code, signal] = await once(child, 'exit') as [number | null, NodeJS.Signals | null]
    clearTimeout(killer)
    t.equal(signal, null, `${name} exited by itself: every stream was closed`)
    t.equal(code, 0, err)
    judge(t, JSON.parse(out.trim().split('\n').at(-1) ?? '{}') as Outcome, servers)
  })
}

t.test('chromium: the same, from a page of another origin (Tower serves the build)', async (t) => {
  if (!canRunBrowserTests(t)) return
  const [browser, tower] = await Promise.all([launchChromium(), startTower({ heartbeatMs: 60_000 })])
  t.teardown(async () => {
    await browser.close()
    await tower.app.close()
  })
  const servers = await startServers(t, true)
  const page = await browser.newPage()
  const errors: string[] = []
  page.on('pageerror', (error) => errors.push(error.message))
  await page.goto(`http://127.0.0.1:${tower.port}/`)
  const line = page.waitForEvent('console', { predicate: (message) => message.text().startsWith('{"post"'), timeout: 20_000 })
  await page.evaluate((scenarioArgs) => { (globalThis as { scenarioArgs?: string[] }).scenarioArgs = scenarioArgs },
    ['/vendor/tower-sse-client/index.js', ...servers.map((server) => server.url)])
  await page.addScriptTag({ type: 'module', content: readFileSync(SCENARIO, 'utf8') })
  judge(t, JSON.parse((await line).text()) as Outcome, servers)

  // Tabs share a stream by a name made of the request: not when its headers are computed per
  // attempt (a tab's own token) or it carries a body. A same-origin static GET is the control.
  // A string: the test's own transform would rewrite an import() inside a function.
  const roles = await page.evaluate(`(async () => {
    const { TowerSseClient } = await import('/vendor/tower-sse-client/index.js')
    // Once open (or, for the POST, which Tower's GET route does not take, once it stopped).
    const roleOnceOpen = async (options) => {
      const client = new TowerSseClient('/api/events', options)
      await new Promise((resolve) => client.addEventListener('statechange', () => {
        if (client.state.kind === 'open' || client.state.kind === 'closed') resolve()
      }))
      const role = client.tabRole
      client.close()
      return role
    }
    return [await roleOnceOpen({}), await roleOnceOpen({ headers: () => ({}) }), await roleOnceOpen({ method: 'POST', body: 'x' })]
  })()`) as string[]
  t.match(roles, [/^(leader|follower)$/, 'own', 'own'])
  t.same(errors, [])
})
