import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { CLIENT_ESM_FILE, PUBLIC_DIR } from '../lib/tower/static-assets'
import { ensureClientEsmBuild } from './fixtures/client-esm-build'
import { request, startTower } from './fixtures/tower'

const INDEX = path.join(PUBLIC_DIR, 'index.html')
const PUBLIC_FILES: Array<[string, string]> = [
  ['index.html', 'text/html; charset=utf-8'],
  ['dashboard.js', 'text/javascript; charset=utf-8'],
  ['style.css', 'text/css; charset=utf-8']
]

t.test('GET / is the dashboard page and its assets are served by name', {
  skip: existsSync(INDEX) ? false : 'lib/tower/public/index.html does not exist yet (the dashboard is written separately)'
}, async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const res = await request(port, 'GET', '/')
  t.equal(res.status, 200)
  t.equal(res.headers['content-type'], 'text/html; charset=utf-8')
  t.equal(res.body, readFileSync(INDEX, 'utf8'))
  for (const [name, type] of PUBLIC_FILES.filter(([name]) => existsSync(path.join(PUBLIC_DIR, name)))) {
    const file = await request(port, 'GET', `/${name}`)
    t.equal(file.status, 200, name)
    t.equal(file.headers['content-type'], type, `${name} content type`)
    t.equal(file.body, readFileSync(path.join(PUBLIC_DIR, name), 'utf8'))
  }
})

t.test('vendor modules come from the installed packages with their content types', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const parserEsm = path.join(path.dirname(require.resolve('eventsource-parser/package.json')), 'dist', 'index.js')
  const uplotDir = path.join(path.dirname(require.resolve('uplot/package.json')), 'dist')
  const files: Array<[string, string, string]> = [
    ['/vendor/eventsource-parser.js', parserEsm, 'text/javascript; charset=utf-8'],
    ['/vendor/uplot.js', path.join(uplotDir, 'uPlot.esm.js'), 'text/javascript; charset=utf-8'],
    ['/vendor/uplot.css', path.join(uplotDir, 'uPlot.min.css'), 'text/css; charset=utf-8']
  ]
  for (const [url, file, type] of files) {
    const res = await request(port, 'GET', url)
    t.equal(res.status, 200, url)
    t.equal(res.headers['content-type'], type, `${url} content type`)
    t.equal(res.headers['x-content-type-options'], 'nosniff')
    t.equal(res.body, readFileSync(file, 'utf8'), `${url} is ${path.relative(process.cwd(), file)}`)
  }
  t.match((await request(port, 'GET', '/vendor/eventsource-parser.js')).body, /export\s*\{/, 'the ESM build, not the CommonJS one')
})

t.test('the browser client is served from its build', async (t) => {
  ensureClientEsmBuild()
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const res = await request(port, 'GET', '/vendor/tower-sse-client/index.js')
  t.equal((await request(port, 'GET', '/vendor/tower-sse-client/index.ts')).status, 404, 'only the modules of the build')
  t.equal(res.status, 200)
  t.equal(res.headers['content-type'], 'text/javascript; charset=utf-8')
  t.equal(res.body, readFileSync(CLIENT_ESM_FILE, 'utf8'))
  const shared = await request(port, 'GET', '/vendor/shared/backoff.js')
  t.equal(shared.status, 200, 'the lib/shared/ module the client imports, where its relative import points')
  t.equal(shared.body, readFileSync(path.join(path.dirname(CLIENT_ESM_FILE), '..', 'shared', 'backoff.js'), 'utf8'))
  t.equal((await request(port, 'GET', '/vendor/shared/slices.js')).status, 404, 'only the shared modules the client imports')
})

t.test('nothing outside the public folder and the named vendor files is served', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  // Each target exists on disk, so a 404 means refused, not merely missing.
  t.ok(existsSync(path.join(PUBLIC_DIR, '..', 'app.ts')))
  const attempts = [
    '/..%2Fapp.ts',
    '/%2e%2e%2fapp.ts',
    '/..%5Capp.ts',
    '/%2E%2E/app.ts',
    '/../app.ts',
    '/vendor/..%2F..%2F..%2Fpackage.json',
    '/vendor/%2e%2e%2fpackage.json',
    '/vendor/index.js',
    '/vendor/uPlot.esm.js',
    '/vendor/constructor',
    '/vendor/__proto__',
    '/.gitignore',
    '/%2egitignore',
    '/package.json',
    '/tsconfig.json',
    '/dashboard.ts',
    '/api',
    '/index.html%00.js'
  ]
  for (const url of attempts) {
    const res = await request(port, 'GET', url)
    t.equal(res.status, 404, `${url} → ${res.status}`)
    t.notMatch(res.body, /"name":\s*"tower-sse"|compilerOptions|import /, `${url} leaks nothing`)
  }
})

t.test('a public file that is not there is a 404 naming it', async (t) => {
  const { app, port } = await startTower()
  t.teardown(() => app.close())
  const res = await request(port, 'GET', '/no-such-file.css')
  t.equal(res.status, 404)
  t.equal(JSON.parse(res.body).message, "no file no-such-file.css in the dashboard's assets")
})
