import { execFile, spawn } from 'node:child_process'
import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { request } from './fixtures/tower'
import { waitFor } from './fixtures/sse-connection'
import { builtDist } from './fixtures/tower-cli'

const run = promisify(execFile)
const ROOT = path.resolve(__dirname, '..')
const FIXTURES = path.join(__dirname, 'fixtures', 'package')

/**
 * The package as a user gets it: the repository's build (npm ci runs it) copied into a staging
 * directory, packed, and installed into an empty project together with fastify — once, for every
 * test below. npm pack's own build is skipped (--ignore-scripts): it would write dist/ while other
 * tests run from it.
 */
async function packAndInstall (dir: string): Promise<{ app: string, files: string[] }> {
  const stage = path.join(dir, 'stage')
  cpSync(builtDist(), path.join(stage, 'dist'), { recursive: true })
  for (const file of ['package.json', 'README.md', 'LICENSE']) copyFileSync(path.join(ROOT, file), path.join(stage, file))
  const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: stage })
  const [{ filename, files }] = JSON.parse(packed.stdout) as Array<{ filename: string, files: Array<{ path: string }> }>
  const app = path.join(dir, 'app')
  rmSync(app, { recursive: true, force: true })
  await run('mkdir', ['-p', app])
  writeFileSync(path.join(app, 'package.json'), '{ "name": "uses-tower-sse", "private": true }\n')
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', path.join(dir, filename), 'fastify@^5'], { cwd: app })
  for (const example of ['example.mjs', 'example.cjs']) copyFileSync(path.join(FIXTURES, example), path.join(app, example))
  return { app, files: files.map((f) => f.path) }
}

const dir = mkdtempSync(path.join(os.tmpdir(), 'tower-sse-package-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))

t.test('npm pack + install into an empty project', async (t) => {
  const { app, files } = await packAndInstall(dir)

  t.test('the tarball holds the build, Tower\'s assets and nothing else', async (t) => {
    for (const file of ['dist/index.js', 'dist/index.d.ts', 'dist/client/index.js', 'dist/client-esm/index.js', 'dist/errors.js',
      'dist/tower/cli.js', 'dist/tower/public/index.html', 'dist/tower/public/dashboard.js', 'dist/tower/vendor/uplot/uPlot.esm.js',
      'dist/tower/vendor/uplot/LICENSE', 'package.json', 'README.md', 'LICENSE']) {
      t.ok(files.includes(file), file)
    }
    t.same(files.filter((f) => !f.startsWith('dist/') && !['package.json', 'README.md', 'LICENSE'].includes(f)), [], 'no sources, tests or benchmarks')
  })

  t.test('dependencies are exactly what the published code imports', async (t) => {
    const manifest = JSON.parse(readFileSync(path.join(app, 'node_modules', 'tower-sse', 'package.json'), 'utf8'))
    t.same(Object.keys(manifest.dependencies).sort(), ['@fastify/error', 'eventsource-parser', 'fastify-plugin', 'find-my-way', 'pino-pretty'])
    t.same(manifest.peerDependenciesMeta, { '@fastify/under-pressure': { optional: true }, ioredis: { optional: true }, 'prom-client': { optional: true } },
      'under-pressure, ioredis and prom-client: used when present, never required')
    const installed = (name: string): boolean => {
      try {
        readFileSync(path.join(app, 'node_modules', name, 'package.json'))
        return true
      } catch {
        return false
      }
    }
    t.equal(installed('uplot'), false, 'the dashboard\'s chart library is not installed with the plugin')
    t.equal(installed('@fastify/under-pressure'), false)
    t.equal(installed('prom-client'), false)
    t.equal(installed('ioredis'), false)
  })

  t.test('the README\'s plugin example runs from the package (ESM), with the client', async (t) => {
    const { stdout } = await run(process.execPath, ['example.mjs'], { cwd: app })
    t.same(JSON.parse(stdout), { seen: ['connected', 'hi'], codes: 'function' })
  })

  t.test('CommonJS: require(\'tower-sse\') is the plugin, and the client requires too', async (t) => {
    const { stdout } = await run(process.execPath, ['example.cjs'], { cwd: app })
    t.same(JSON.parse(stdout), { first: 'connected', same: true, option: 'TOWER_SSE_OPTION' })
  })

  t.test('the tower bin runs from the package with its dashboard', async (t) => {
    const child = spawn(path.join(app, 'node_modules', '.bin', 'tower'), ['--port', '0'], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve))
    t.teardown(() => { child.kill() })
    await waitFor('tower to listen', () => /listening on http:\/\/127\.0\.0\.1:\d+/.test(out), 20_000)
    const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)?.[1])
    for (const url of ['/', '/dashboard.js', '/vendor/uplot.js', '/vendor/uplot.css', '/vendor/eventsource-parser.js', '/vendor/tower-sse-client/index.js',
      '/vendor/tower-sse-client/tabs.js']) {
      t.equal((await request(port, 'GET', url)).status, 200, url)
    }
    const metrics = await request(port, 'GET', '/metrics')
    t.equal(metrics.status, 501, 'without prom-client, /metrics says how to turn it on')
    t.equal(JSON.parse(metrics.body).code, 'TOWER_METRICS_UNAVAILABLE')
    child.kill('SIGTERM')
    t.equal(await exited, 0, 'SIGTERM: exit 0')
  })
})
