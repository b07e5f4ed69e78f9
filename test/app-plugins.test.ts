// The headers an app's plugins set (@fastify/cors with credentials, @fastify/rate-limit, helmet, a
// hook's x-request-id and cookie) reach the stream and tower-sse's 503; a page on another origin
// reads the stream in Chromium through CORS.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import Fastify from 'fastify'
import cors from '@fastify/cors'
import helmet from '@fastify/helmet'
import rateLimit from '@fastify/rate-limit'
import type { Browser } from 'playwright-core'
import towerSse from '../lib'
import { canRunBrowserTests, launchChromium } from './fixtures/browser'
import { listenOnLoopback } from './fixtures/loopback-server'
import { connect, waitFor } from './fixtures/sse-connection'

/** An app as its owner writes it: CORS for one page origin with cookies, rate-limit, helmet, a request id. */
async function startApp (pageOrigin: string) {
  const app = Fastify({ logger: false })
  await app.register(cors, { origin: pageOrigin, credentials: true })
  await app.register(rateLimit, { max: 100, timeWindow: 60_000 })
  await app.register(helmet)
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
    reply.header('set-cookie', 'session=abc; Path=/; HttpOnly; SameSite=None')
  })
  await app.register(towerSse, { maxClients: 2, maxClientsPerKey: 1, heartbeatMs: 60_000 })
  await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, port: (app.server.address() as AddressInfo).port }
}

const PAGE_ORIGIN = 'http://127.0.0.1:1'

t.test('every plugin\'s header is on the stream and on the 429 and 503 refusals (raw HTTP)', async (t) => {
  const { app, port } = await startApp(PAGE_ORIGIN)
  t.teardown(() => app.close())
  const fromHooks = {
    'access-control-allow-origin': PAGE_ORIGIN,
    'access-control-allow-credentials': 'true',
    'x-content-type-options': 'nosniff',
    'x-request-id': /^req-/,
    'set-cookie': ['session=abc; Path=/; HttpOnly; SameSite=None']
  }
  // @fastify/rate-limit adds its hook to each route's onRequest, behind tower-sse's early check.
  const fromRateLimit = { 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': /^\d+$/ }
  const stream = await connect(port, '/api/events', { origin: PAGE_ORIGIN })
  t.equal(stream.status, 200)
  t.match(stream.headers, { ...fromHooks, ...fromRateLimit, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform' })
  const perKey = await connect(port, '/api/events', { origin: PAGE_ORIGIN })
  t.equal(perKey.status, 429, 'decided after the route\'s hooks')
  t.match(perKey.headers, { ...fromHooks, ...fromRateLimit, 'retry-after': /^\d+$/, 'content-type': 'application/json; charset=utf-8' })
  const other = await connect(port, '/api/events', { origin: PAGE_ORIGIN }, { localAddress: '127.0.0.2' })
  t.equal(other.status, 200)
  const full = await connect(port, '/api/events', { origin: PAGE_ORIGIN }, { localAddress: '127.0.0.3' })
  t.equal(full.status, 503, 'decided early, before the route\'s own hooks')
  t.match(full.headers, { ...fromHooks, 'retry-after': /^\d+$/, 'content-type': 'application/json; charset=utf-8' })
  stream.destroy()
  other.destroy()
})

t.test('rate-limit as a context hook (its one line): the early 503 carries x-ratelimit-* too, as the stream and the 429 do', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(rateLimit, { global: false, max: 100, timeWindow: 60_000 })
  // Runs before every route's own hooks, so before tower-sse's early check.
  app.addHook('onRequest', app.rateLimit())
  await app.register(towerSse, { maxClients: 2, maxClientsPerKey: 1, heartbeatMs: 60_000 })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const port = (app.server.address() as AddressInfo).port
  const stream = await connect(port, '/api/events')
  const perKey = await connect(port, '/api/events')
  const other = await connect(port, '/api/events', {}, { localAddress: '127.0.0.2' })
  const full = await connect(port, '/api/events', {}, { localAddress: '127.0.0.3' })
  t.same([stream.status, perKey.status, other.status, full.status], [200, 429, 200, 503])
  await full.ended
  t.match(JSON.parse(full.body), { code: 'TOWER_SSE_CAPACITY' }, 'the early refusal')
  for (const [name, c] of [['stream', stream], ['429', perKey], ['early 503', full]] as const) {
    t.match(c.headers, { 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': /^\d+$/ }, `${name}: rate-limit's headers`)
  }
  stream.destroy()
  other.destroy()
})

if (canRunBrowserTests(t)) {
  t.test('Chromium: a page on another origin reads the stream with EventSource withCredentials', async (t) => {
    const page = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
      res.end('<!doctype html><title>page</title>')
    })
    const pageServer = await listenOnLoopback(page)
    t.teardown(pageServer.close)
    const origin = `http://127.0.0.1:${pageServer.port}`
    const { app, port } = await startApp(origin)
    t.teardown(() => app.close())
    const browser: Browser = await launchChromium()
    t.teardown(() => browser.close())
    const tab = await browser.newPage()
    await tab.goto(origin)
    await tab.evaluate((url) => {
      const w = window as unknown as { got: string[], failed: number }
      w.got = []
      w.failed = 0
      const source = new EventSource(url, { withCredentials: true })
      source.onmessage = (event) => { w.got.push(event.data as string) }
      source.onerror = () => { w.failed++ }
    }, `http://127.0.0.1:${port}/api/events`)
    await waitFor('the page\'s stream open', () => app.sse.size === 1)
    await app.sse.broadcast('across origins')
    await tab.waitForFunction(() => (window as unknown as { got: string[] }).got.length === 1, undefined, { timeout: 5000 })
    t.same(await tab.evaluate(() => (window as unknown as { got: string[] }).got), ['across origins'])
    t.equal(await tab.evaluate(() => (window as unknown as { failed: number }).failed), 0, 'no error on the page\'s EventSource')
  })
}
