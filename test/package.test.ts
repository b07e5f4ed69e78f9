import { execFile, spawn } from 'node:child_process'
import { copyFileSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { request } from './fixtures/tower'
import { waitFor } from './fixtures/sse-connection'
import { packAndInstall } from './fixtures/packed'

const run = promisify(execFile)
const FIXTURES = path.join(__dirname, 'fixtures', 'package')

t.test('npm pack + install into an empty project', async (t) => {
  // The examples run from a directory of this test's own inside the project that installed the tarball.
  const { project, dir: app, files } = await packAndInstall(t)
  const bin = path.join(project, 'node_modules', '.bin', 'tower')
  for (const example of ['example.mjs', 'example.cjs']) copyFileSync(path.join(FIXTURES, example), path.join(app, example))

  t.test('the tarball holds the build, Tower\'s assets and nothing else', async (t) => {
    for (const file of ['dist/index.js', 'dist/index.d.ts', 'dist/client/index.js', 'dist/client-esm/client/index.js', 'dist/client-esm/client/index.d.ts',
      'dist/client-esm/shared/backoff.js', 'dist/client-esm/package.json', 'dist/errors.js',
      'dist/tower/cli.js', 'dist/tower/public/index.html', 'dist/tower/public/dashboard.js', 'dist/tower/vendor/uplot/uPlot.esm.js',
      'dist/tower/vendor/uplot/LICENSE', 'package.json', 'README.md', 'LICENSE', 'docs/README.md', 'docs/tower.md',
      'benchmarks/README.md', 'benchmarks/results/storm.md', 'benchmarks/results/storm.svg']) {
      t.ok(files.includes(file), file)
    }
    t.notOk(files.includes('dist/internal.js'), 'no internal entry')
    const shipped = (f: string): boolean => f.startsWith('dist/') || ['package.json', 'README.md', 'LICENSE', 'benchmarks/README.md'].includes(f) ||
      /^docs\/[\w-]+\.md$/.test(f) || /^benchmarks\/results\/[\w-]+\.(md|svg)$/.test(f) || /^examples\/proxies\/[\w.-]+$/.test(f)
    t.same(files.filter((f) => !shipped(f)), [], 'no sources, tests, benchmark code or raw results: the docs, the results\' pages and the proxies\' configs docs/proxies.md shows')
    t.same(JSON.parse(readFileSync(path.join(project, 'node_modules', 'tower-sse', 'dist', 'client-esm', 'package.json'), 'utf8')), { type: 'module' },
      'the ESM client build is read as ES modules')
  })

  t.test('dependencies are exactly what the published code imports', async (t) => {
    const manifest = JSON.parse(readFileSync(path.join(project, 'node_modules', 'tower-sse', 'package.json'), 'utf8'))
    t.same(Object.keys(manifest.dependencies).sort(), ['@fastify/error', 'eventsource-parser', 'fastify-plugin'],
      'the plugin\'s and the client\'s only: Tower\'s pino-pretty is not one, and its router is Fastify\'s own find-my-way')
    const lifecycle = ['preinstall', 'install', 'postinstall', 'prepare', 'preprepare', 'postprepare', 'prepublish']
    t.same(Object.keys(manifest.scripts ?? {}).filter((name) => lifecycle.includes(name)), [], 'no script runs when a user installs the package')
    t.same(manifest.peerDependenciesMeta, { '@fastify/under-pressure': { optional: true }, ioredis: { optional: true }, 'prom-client': { optional: true } },
      'under-pressure, ioredis and prom-client: used when present, never required')
    const installed = (name: string): boolean => {
      try {
        readFileSync(path.join(project, 'node_modules', name, 'package.json'))
        return true
      } catch {
        return false
      }
    }
    t.equal(installed('uplot'), false, 'the dashboard\'s chart library is not installed with the plugin')
    t.equal(installed('pino-pretty'), false, 'nor Tower\'s readable log lines')
    t.equal(installed('@fastify/under-pressure'), false)
    t.equal(installed('prom-client'), false)
    t.equal(installed('ioredis'), false)
  })

  t.test('the README\'s plugin example runs from the package (ESM), with the client', async (t) => {
    const { stdout } = await run(process.execPath, ['example.mjs'], { cwd: app })
    t.same(JSON.parse(stdout), { seen: ['connected', 'hi'], codes: 'function', crossSite: [415, 'FST_ERR_CTP_INVALID_MEDIA_TYPE'], foreignOrigin: 'TOWER_SSE_ORIGIN_NOT_ALLOWED', events: 1 },
      'cross-site text/plain and a foreign Origin are refused on notify: only the JSON one was broadcast')
  })

  t.test('CommonJS: require(\'tower-sse\') is the plugin, and the client requires too', async (t) => {
    const { stdout } = await run(process.execPath, ['example.cjs'], { cwd: app })
    t.same(JSON.parse(stdout), { first: 'connected', same: true, option: 'TOWER_SSE_OPTION' })
  })

  t.test('the tower bin runs from the package with its dashboard', async (t) => {
    const child = spawn(bin, ['--port', '0'], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve))
    t.teardown(() => { child.kill() })
    await waitFor('tower to listen', () => /listening on http:\/\/127\.0\.0\.1:\d+/.test(out), 20_000)
    const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)?.[1])
    for (const url of ['/', '/dashboard.js', '/vendor/uplot.js', '/vendor/uplot.css', '/vendor/eventsource-parser.js', '/vendor/tower-sse-client/index.js',
      '/vendor/tower-sse-client/tabs.js', '/vendor/shared/backoff.js']) {
      t.equal((await request(port, 'GET', url)).status, 200, url)
    }
    const metrics = await request(port, 'GET', '/metrics')
    t.equal(metrics.status, 501, 'without prom-client, /metrics says how to turn it on')
    t.equal(JSON.parse(metrics.body).code, 'TOWER_METRICS_UNAVAILABLE')
    child.kill('SIGTERM')
    t.equal(await exited, 0, 'SIGTERM: exit 0')
  })

  t.test('the tower bin asked for readable lines without pino-pretty says how to get them', async (t) => {
    const failed = await run(bin, ['--port', '0', '--log-format', 'pretty'], { cwd: app })
      .then(() => null, (err: { code: number, stderr: string }) => err)
    t.equal(failed?.code, 1)
    t.match(failed?.stderr, /^tower: log format pretty needs pino-pretty, .*: npm install pino-pretty, or use --log-format json\n$/)
  })
})
