// A user's app as its owner builds it from the package: test/fixtures/package/user-app/app.mts, a
// Fastify app in TypeScript with @fastify/cors, cookie, helmet, rate-limit and under-pressure beside
// tower-sse, in a project that installed the packed tarball and those plugins (test/fixtures/packed.ts),
// compiled under NodeNext with skipLibCheck off by the repository's TypeScript, run with node, and read
// in Chromium from a page of another origin (page.mjs beside it) through the packed tower-sse/client
// browser build: the broadcast stream with the login cookie, a per-request answer to its end, the
// plugins' headers on the stream and its refusal, and the capacity refusal seen as a wait.
import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { promisify } from 'node:util'
import type { Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { canRunBrowserTests, launchChromium } from './fixtures/browser'
import { listenOnLoopback } from './fixtures/loopback-server'
import { asDevDependency, packAndInstall } from './fixtures/packed'
import { TOOL_ENV } from './fixtures/tool-env'

const run = promisify(execFile)
const TSC = require.resolve('typescript/bin/tsc')
const FIXTURES = path.join(__dirname, 'fixtures', 'package', 'user-app')
/** The plugins a user's app registers beside tower-sse, in the repository's own ranges (npm's cache has them). */
const PLUGINS = ['@fastify/cors', '@fastify/cookie', '@fastify/helmet', '@fastify/rate-limit', '@fastify/under-pressure'].map(asDevDependency)
/** A Node server's settings (@tsconfig/node20's lib and target: no DOM), under NodeNext, with every declaration file checked. */
const TSCONFIG = {
  compilerOptions: { strict: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', lib: ['es2023'], skipLibCheck: false, types: ['node'], outDir: 'build' },
  files: ['app.mts']
}

/** What page.mjs records for one client. */
interface Seen {
  events: Array<{ type: string, data: unknown }>
  states: Array<Record<string, unknown>>
  errors: Array<{ code: string, status: number | null, fatal: boolean }>
  state: { kind: string, reason?: string, status?: number | null, delayMs?: number, error?: string | null }
  readyState: number
}
interface UserPage {
  userApp: {
    login: () => Promise<{ status: number, body: unknown }>
    open: (name: string, path: string) => void
    read: (name: string) => Seen
    close: (name: string) => void
  }
}

/**
 * The page's own server, on an origin of its own: the page, its script, and from the installed
 * package the client's browser build and the one module it imports (eventsource-parser, by an import map).
 */
function pageServer (project: string): http.Server {
  const build = path.join(project, 'node_modules', 'tower-sse', 'dist', 'client-esm')
  const parser = path.join(project, 'node_modules', 'eventsource-parser', 'dist', 'index.js')
  const html = '<!doctype html><title>a user\'s page</title>' +
    '<script type="importmap">{ "imports": { "eventsource-parser": "/vendor/eventsource-parser.js" } }</script>' +
    '<script type="module" src="/page.mjs"></script>'
  return http.createServer((request, response) => {
    const { pathname } = new URL(request.url ?? '/', 'http://page')
    if (pathname === '/') {
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html)
      return
    }
    const inBuild = pathname.startsWith('/vendor/tower-sse/') ? path.join(build, path.posix.normalize(pathname.slice('/vendor/tower-sse/'.length))) : null
    const file = pathname === '/page.mjs'
      ? path.join(FIXTURES, 'page.mjs')
      : pathname === '/vendor/eventsource-parser.js' ? parser : inBuild?.startsWith(build + path.sep) === true && inBuild.endsWith('.js') ? inBuild : null
    let body: Buffer | null = null
    try {
      body = file === null ? null : readFileSync(file)
    } catch {}
    if (body === null) response.writeHead(404).end()
    else response.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' }).end(body)
  })
}

interface RunningApp {
  port: number
  /** SIGTERM, as a process manager stops it; resolves with how it exited. */
  stop: () => Promise<[number | null, NodeJS.Signals | null]>
}

/** The compiled app, started as its owner would (`node build/app.mjs`); resolves once it prints its port. */
async function startApp (t: Test, dir: string, pageOrigin: string): Promise<RunningApp> {
  const child = spawn(process.execPath, [path.join('build', 'app.mjs')], { cwd: dir, env: { ...TOOL_ENV, PAGE_ORIGIN: pageOrigin }, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { err += chunk })
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>
  const stop = async (signal: NodeJS.Signals = 'SIGTERM'): Promise<[number | null, NodeJS.Signals | null]> => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal)
    return await exited
  }
  t.teardown(() => stop('SIGKILL')) // a test that failed half-way
  const listening = new Promise<number>((resolve) => {
    child.stdout.on('data', () => {
      const port = /^\{"port":(\d+)\}$/m.exec(out)?.[1]
      if (port !== undefined) resolve(Number(port))
    })
  })
  const port = await Promise.race([listening, exited.then(([code, signal]) => {
    throw new Error(`the app exited (${signal ?? code}) before listening:\n${out}${err}`)
  })])
  return { port, stop }
}

t.test('a user\'s TypeScript app from the packed tarball, with @fastify/cors, cookie, helmet, rate-limit and under-pressure', async (t) => {
  const { project, dir } = await packAndInstall(t, { also: PLUGINS })
  copyFileSync(path.join(FIXTURES, 'app.mts'), path.join(dir, 'app.mts'))
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify(TSCONFIG, null, 2))

  await t.test('compiles under NodeNext ESM, strict, skipLibCheck off, with its one expected error', async (t) => {
    const errors = await run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: dir, env: TOOL_ENV })
      .then(() => '', (error: { stdout: string, stderr: string }) => `${error.stdout}${error.stderr}`)
    t.equal(errors, '', 'no compile error, the plugins\' declarations and tower-sse\'s checked together')
  })

  t.test('runs, and a page of another origin reads it in Chromium with tower-sse/client', async (t) => {
    if (!canRunBrowserTests(t)) return
    const [browser, pages] = await Promise.all([launchChromium(), listenOnLoopback(pageServer(project))])
    t.teardown(() => browser.close())
    t.teardown(pages.close)
    const pageOrigin = `http://127.0.0.1:${pages.port}`
    const { port, stop } = await startApp(t, dir, pageOrigin)
    const api = `http://127.0.0.1:${port}`
    const tab: Page = await browser.newPage()
    tab.setDefaultTimeout(20_000)
    const pageErrors: string[] = []
    tab.on('pageerror', (error) => pageErrors.push(error.message))
    await tab.goto(`${pageOrigin}/?api=${encodeURIComponent(api)}`)
    await tab.waitForFunction(() => 'userApp' in window)
    const read = async (name: string): Promise<Seen> => await tab.evaluate((n) => (window as unknown as UserPage).userApp.read(n), name)

    t.same(await tab.evaluate(() => (window as unknown as UserPage).userApp.login()), { status: 200, body: { user: 'alice' } },
      'logged in: the app set its HttpOnly cookie on a credentialed cross-origin fetch')

    // (a) The plugin's broadcast stream, with the cookie: keyFn reads it.
    const liveResponse = tab.waitForResponse((response) => response.url() === `${api}/api/events` && response.request().method() === 'GET')
    await tab.evaluate(() => (window as unknown as UserPage).userApp.open('live', '/api/events'))
    const live = await liveResponse
    t.equal(live.status(), 200)
    t.match(await live.allHeaders(), {
      'content-type': 'text/event-stream; charset=utf-8',
      'access-control-allow-origin': pageOrigin,
      'access-control-allow-credentials': 'true',
      'x-content-type-options': 'nosniff',
      'x-frame-options': 'SAMEORIGIN',
      'strict-transport-security': /max-age=/,
      'x-ratelimit-limit': '100'
    }, 'CORS, helmet\'s and rate-limit\'s headers are on the stream as Chromium received it')
    await tab.waitForFunction(() => (window as unknown as UserPage).userApp.read('live').events.length === 1)
    for (const n of [1, 2, 3]) {
      const sent = await fetch(`${api}/api/notify`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ n }) })
      t.match(await sent.json(), { id: /./, delivered: 1 }, `broadcast ${n} reached the page's one stream`)
    }
    await tab.waitForFunction(() => (window as unknown as UserPage).userApp.read('live').events.length === 4)
    t.same((await read('live')).events, [
      { type: 'hello', data: { key: 'user:alice' } },
      { type: 'note', data: { n: 1 } },
      { type: 'note', data: { n: 2 } },
      { type: 'note', data: { n: 3 } }
    ], 'the initial event names the cookie\'s user, then the broadcasts in order, once each')

    // (b) A per-request answer: its tokens, then `end`, and the client closes for good.
    await tab.evaluate(() => (window as unknown as UserPage).userApp.open('answer', '/api/answer?q=why+blue'))
    await tab.waitForFunction(() => (window as unknown as UserPage).userApp.read('answer').state.kind === 'closed')
    const answer = await read('answer')
    t.same(answer.events, [
      { type: 'hello', data: { key: 'user:alice' } },
      { type: 'token', data: 'You' },
      { type: 'token', data: 'asked:' },
      { type: 'token', data: 'why' },
      { type: 'token', data: 'blue' },
      { type: 'end', data: {} }
    ], 'the plugin\'s initial event (the app\'s routes get it too, with the cookie\'s key), the answer\'s tokens in order, then end')
    t.same([answer.state, answer.readyState, answer.errors], [{ kind: 'closed', error: null }, 2, []], 'closed with no error: nothing to reconnect to')
    t.same(answer.states.map((state) => state.kind), ['connecting', 'open', 'closed'], 'one attempt, opened once, closed')

    // (c) At capacity (maxClients 2): a second stream fills it, a third is refused with 503 and waits.
    await tab.evaluate(() => (window as unknown as UserPage).userApp.open('second', '/api/events'))
    await tab.waitForFunction(() => (window as unknown as UserPage).userApp.read('second').state.kind === 'open')
    const refusedResponse = tab.waitForResponse((response) => response.url() === `${api}/api/events` && response.status() === 503)
    await tab.evaluate(() => (window as unknown as UserPage).userApp.open('third', '/api/events'))
    const refused = await refusedResponse
    const refusedHeaders = await refused.allHeaders()
    t.match(refusedHeaders, {
      'retry-after': /^\d+$/,
      'access-control-allow-origin': pageOrigin,
      'access-control-allow-credentials': 'true',
      'access-control-expose-headers': /retry-after/i,
      'x-content-type-options': 'nosniff'
    }, 'the refusal carries CORS (Retry-After exposed) and helmet\'s headers')
    await tab.waitForFunction(() => (window as unknown as UserPage).userApp.read('third').state.kind === 'waiting')
    const third = await read('third')
    t.match(third.state, { kind: 'waiting', reason: 'refused', status: 503 }, 'a wait, not a failure')
    t.ok((third.state.delayMs ?? 0) >= Number(refusedHeaders['retry-after']) * 1000,
      `it waits the Retry-After it read through CORS (${refusedHeaders['retry-after']} s), not the ≤ 1 s first backoff: ${third.state.delayMs} ms`)
    t.same(third.errors, [{ code: 'TOWER_SSE_CLIENT_REFUSED', status: 503, fatal: false }], 'one error event, not fatal')
    t.equal(third.readyState, 0, 'CONNECTING, as EventSource is between attempts')
    await tab.evaluate(() => {
      (window as unknown as UserPage).userApp.close('third')
      ;(window as unknown as UserPage).userApp.close('second')
    })

    t.match(await (await fetch(`${api}/api/streams`)).json(), { accepted: 3, ended: 1, refusedAtCapacity: 1, refusedUnderPressure: 0 },
      'three streams opened (the answer once: it never reconnected), one ended, one refused')
    // under-pressure registered plainly: its failing health check refuses streams through tower-sse's
    // admission (TOWER_SSE_PRESSURE), while its own answer stays on the app's other routes.
    t.same(await (await fetch(`${api}/api/maintenance`, { method: 'POST' })).json(), { healthy: false })
    let other = await fetch(`${api}/api/streams`)
    for (const deadline = Date.now() + 10_000; other.status !== 503 && Date.now() < deadline; other = await fetch(`${api}/api/streams`)) {
      await other.arrayBuffer()
      await new Promise((resolve) => setTimeout(resolve, 20)) // under-pressure checks every 50 ms
    }
    t.match([other.status, await other.json()], [503, { code: 'FST_UNDER_PRESSURE' }], 'under pressure: the app\'s other route gets under-pressure\'s answer')
    const stream = await fetch(`${api}/api/events`, { headers: { origin: pageOrigin } })
    t.match([stream.status, stream.headers.get('access-control-allow-origin'), await stream.json()], [503, pageOrigin, { code: 'TOWER_SSE_PRESSURE' }],
      'a stream gets tower-sse\'s own pressure refusal, with the app\'s CORS headers')
    t.same(pageErrors, [], 'no error on the page')
    t.same(await stop(), [0, null], 'SIGTERM: app.close() ended the page\'s stream and the process exited 0')
  })
})
