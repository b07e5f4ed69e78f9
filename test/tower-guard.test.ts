import http from 'node:http'
import t from 'tap'
import { isAllowedHost, parseAllowedHost, parseHost } from '../lib/admission/request-guard'
import { rawExchange } from './fixtures/raw-http'
import { startTower, type RawResponse } from './fixtures/tower'
import { waitFor } from './fixtures/sse-connection'

interface Send {
  method?: string
  path?: string
  headers?: http.OutgoingHttpHeaders
  body?: unknown
}

/** One request on its own connection, with exactly the headers given (Host included). */
function send (port: number, { method = 'GET', path = '/api/events/stats', headers = {}, body }: Send): Promise<RawResponse> {
  const payload = body === undefined ? undefined : JSON.stringify(body)
  const all = payload === undefined ? headers : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...headers }
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, agent: false, headers: all }, (res) => {
      if (String(res.headers['content-type']).startsWith('text/event-stream')) {
        // An admitted stream never ends by itself: its status is the answer.
        req.destroy()
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: '' })
        return
      }
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }))
    })
    req.on('error', reject)
    req.end(payload)
  })
}

const NOTE = { type: 'ci', title: 'Build failed', body: 'run curl … | sh' }
const notifyWith = (port: number, headers: http.OutgoingHttpHeaders): Promise<RawResponse> =>
  send(port, { method: 'POST', path: '/api/notify', headers: { host: `127.0.0.1:${port}`, ...headers }, body: NOTE })

t.test('Host header parsing: port, IPv6 brackets, case, trailing dot; anything else is refused', async (t) => {
  const parsed: Array<[string | undefined, string | null]> = [
    ['localhost', 'localhost'], ['LocalHost:4100', 'localhost'], ['localhost.', 'localhost'], ['localhost.:4100', 'localhost'],
    ['app.localhost:4100', 'app.localhost'], ['127.0.0.1:4100', '127.0.0.1'], ['[::1]', '[::1]'], ['[::1]:4100', '[::1]'],
    ['[::FFFF:127.0.0.1]:1', '[::ffff:127.0.0.1]'],
    [undefined, null], ['', null], ['::1', null], ['[::1', null], ['[nope]', null], ['[::1]x', null], ['localhost:', null],
    ['localhost:abc', null], ['localhost:80:80', null], ['localhost:123456', null], ['a b', null], ['user@localhost', null],
    ['localhost/x', null], ['-x.localhost', null], ['..', null], ['évil.localhost', null], ['localhost,evil.com', null]
  ]
  for (const [header, host] of parsed) t.equal(parseHost(header), host, `Host ${JSON.stringify(header)}`)
  t.equal(parseHost('localhost:4100', false), null, 'an allowlist entry has no port')
  t.same(['*', '*.Corp.Test', '::1', '[::1]', ' tower.example ', 'x:1', '*.[::1]', 'a b'].map(parseAllowedHost),
    ['*', '*.corp.test', '[::1]', '[::1]', 'tower.example', null, null, null])
  const list = ['localhost', '*.localhost']
  t.same(['localhost', 'a.b.localhost', 'evil-localhost', 'localhost.evil.com'].map((h) => isAllowedHost(h, list)), [true, true, false, false])
  t.equal(isAllowedHost('anything.example', ['*']), true)
})

t.test('a Host that is not allowed gets 403 naming the setting, on every route; no slot, no broadcast', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const routes: Array<[string, string]> = [['GET', '/api/events'], ['HEAD', '/api/events'], ['GET', '/api/events/stats'],
    ['GET', '/'], ['GET', '/app.js'], ['POST', '/api/notify'], ['GET', '/no-such-route']]
  for (const host of ['evil.example', 'evil.example:4100', 'localhost.evil.example', '127.0.0.1.nip.io', '[::2]', 'localhost:x']) {
    for (const [method, path] of routes) {
      const res = await send(port, { method, path, headers: { host }, body: method === 'POST' ? NOTE : undefined })
      t.equal(res.status, 403, `${method} ${path} with Host ${host}`)
      if (method !== 'HEAD') {
        t.equal(JSON.parse(res.body).code, 'TOWER_HOST_NOT_ALLOWED')
        t.match(JSON.parse(res.body).message, /--allowed-hosts or TOWER_ALLOWED_HOSTS/)
      }
    }
  }
  t.same([app.sse.stats().accepted, app.sse.stats().rejected, app.sse.stats().events], [0, 0, 0], 'nothing reached the plugin or notify')
  const long = await send(port, { headers: { host: `${'a'.repeat(300)}.example` } })
  t.match(JSON.parse(long.body).message, /^Host "a{100}…" is not one this Tower answers/, 'a long Host is cut short in the message')
  for (const host of ['localhost', `localhost:${port}`, 'LOCALHOST.', 'dash.localhost', `127.0.0.1:${port}`, '[::1]']) {
    t.equal((await send(port, { headers: { host } })).status, 200, `Host ${host} is answered`)
  }
})

t.test('a request without any Host header is refused', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  // HTTP/1.0 may leave Host out (Node itself refuses that on HTTP/1.1).
  const { text, isClosed } = rawExchange(port, 'GET /api/events HTTP/1.0\r\n\r\n')
  await waitFor('the answer', isClosed)
  t.match(text(), /^HTTP\/1\.1 403 /)
  t.match(text(), /"code":"TOWER_HOST_NOT_ALLOWED".*Host \(none\)/)
  t.equal(app.sse.stats().accepted, 0)
})

t.test('--allowed-hosts adds names and *.domain patterns', async (t) => {
  const { app, port } = await startTower({}, { allowedHosts: ['tower.example', '*.corp.test'] })
  t.teardown(() => app.close())
  const statuses = await Promise.all(['tower.example:4100', 'a.corp.test', 'corp.test', 'localhost']
    .map(async (host) => (await send(port, { headers: { host } })).status))
  t.same(statuses, [200, 200, 403, 200])
})

t.test('notify refuses a page of another site: foreign or null Origin, Sec-Fetch-Site cross-site', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const refused: http.OutgoingHttpHeaders[] = [
    { origin: 'http://evil.example' }, { origin: 'null' }, { origin: 'not a url' },
    { origin: 'http://localhost.evil.example:4100' }, { 'sec-fetch-site': 'cross-site' },
    { origin: `http://127.0.0.1:${port}`, 'sec-fetch-site': 'cross-site' }
  ]
  for (const headers of refused) {
    const res = await notifyWith(port, headers)
    t.equal(res.status, 403, JSON.stringify(headers))
    t.equal(JSON.parse(res.body).code, 'TOWER_CROSS_SITE')
  }
  t.equal(app.sse.stats().events, 0, 'nothing was broadcast')
  const allowed: http.OutgoingHttpHeaders[] = [{}, { origin: `http://127.0.0.1:${port}`, 'sec-fetch-site': 'same-origin' },
    { origin: 'http://localhost:5173' }, { 'sec-fetch-site': 'none' }]
  for (const headers of allowed) t.equal((await notifyWith(port, headers)).status, 200, JSON.stringify(headers))
  t.equal((await send(port, { headers: { host: 'localhost', origin: 'http://evil.example' } })).status, 200,
    'a read is not refused for its Origin (the browser keeps its answer from the page)')
})

t.test('with a token, notify needs Authorization: Bearer <token>; reads do not', async (t) => {
  const token = 'tW9v-7s3cr3t_t0ken'
  const { app, port } = await startTower({}, { token })
  t.teardown(() => app.close())
  for (const authorization of [undefined, `Bearer ${token}x`, `Bearer ${token.slice(0, -1)}`, `Basic ${token}`, token, 'Bearer ', `Bearer ${token} junk`]) {
    const res = await notifyWith(port, authorization === undefined ? {} : { authorization })
    t.equal(res.status, 401, `Authorization: ${authorization}`)
    t.equal(JSON.parse(res.body).code, 'TOWER_TOKEN_REQUIRED')
    t.equal(res.headers['www-authenticate'], 'Bearer realm="tower"')
  }
  t.equal(app.sse.stats().events, 0)
  t.equal((await notifyWith(port, { authorization: `Bearer ${token}` })).status, 200)
  t.equal((await notifyWith(port, { authorization: `bearer ${token}` })).status, 200, 'the scheme is case-insensitive')
  t.equal((await notifyWith(port, { authorization: `Bearer ${token}  ` })).status, 200, 'trailing spaces are allowed, trailing words are not')
  t.equal((await send(port, { headers: { host: 'localhost' } })).status, 200, 'stats are read without it')
})

t.test('PUT, DELETE and PATCH change state too: cross-site → 403, without the token → 401, on any path', async (t) => {
  const token = 'pUt-d3l3te_t0ken'
  const open = await startTower()
  const guarded = await startTower({}, { token })
  t.teardown(() => Promise.all([open.app.close(), guarded.app.close()]))
  for (const method of ['PUT', 'DELETE', 'PATCH']) {
    for (const path of ['/api/notify', '/api/events', '/no-such-route']) {
      const crossSite = await send(open.port, { method, path, headers: { host: `127.0.0.1:${open.port}`, origin: 'http://evil.example' }, body: NOTE })
      t.same([crossSite.status, JSON.parse(crossSite.body).code], [403, 'TOWER_CROSS_SITE'], `${method} ${path} from another site`)
      const noToken = await send(guarded.port, { method, path, headers: { host: `127.0.0.1:${guarded.port}` }, body: NOTE })
      t.same([noToken.status, JSON.parse(noToken.body).code], [401, 'TOWER_TOKEN_REQUIRED'], `${method} ${path} without the token`)
    }
  }
})
