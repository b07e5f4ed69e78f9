/**
 * The module map's two rules, checked on the real dependency graph (dependency-cruiser, with
 * TypeScript's type-only imports included): no import cycle in lib/, and Tower (lib/tower/) uses
 * the plugin only through what the package exports.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'

interface Dependency { resolved: string, circular: boolean, dependencyTypes: string[] }
interface Module { source: string, dependencies: Dependency[] }

const root = path.join(__dirname, '..')

function cruise (): Module[] {
  const run = spawnSync(path.join(root, 'node_modules', '.bin', 'depcruise'), [
    'lib', '--no-config', '--ts-config', 'tsconfig.json', '--ts-pre-compilation-deps',
    '--exclude', '^node_modules', '--do-not-follow', '^node_modules', '--output-type', 'json'
  ], { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 25_000 })
  if (run.status !== 0) throw new Error(`depcruise exited with ${run.status}: ${run.stderr}`)
  return (JSON.parse(run.stdout) as { modules: Module[] }).modules.filter((m) => m.source.startsWith('lib/'))
}

/** The package's entry points (package.json "exports"), as the lib/ sources they are built from. */
function publicEntries (): string[] {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { exports: Record<string, string | { default: string }> }
  return Object.values(pkg.exports)
    .map((target) => typeof target === 'string' ? target : target.default)
    .filter((target) => target.startsWith('./dist/'))
    .map((target) => target.replace(/^\.\/dist\//, 'lib/').replace(/\.js$/, '.ts'))
}

const modules = cruise()

t.test('the graph is read with type-only imports (a cycle through types counts)', async (t) => {
  t.ok(modules.length > 40, `${modules.length} modules in lib/`)
  const hub = modules.find((m) => m.source === 'lib/streams/hub.ts')
  t.ok(hub?.dependencies.some((d) => d.resolved === 'lib/observe/vocabulary.ts' && d.dependencyTypes.includes('type-only')), 'streams/hub.ts → observe/vocabulary.ts, type-only, is in the graph')
})

t.test('no import cycle in lib/', async (t) => {
  const cycles = modules.flatMap((m) => m.dependencies.filter((d) => d.circular).map((d) => `${m.source} → ${d.resolved}`))
  t.same(cycles, [])
})

t.test('the vocabulary is a leaf: lib/observe/vocabulary.ts imports nothing of lib/ but the bus\'s stats type', async (t) => {
  const outcomes = modules.find((m) => m.source === 'lib/observe/vocabulary.ts')
  t.same(outcomes?.dependencies.map((d) => `${d.resolved} (${d.dependencyTypes.includes('type-only') ? 'type' : 'value'})`), ['lib/bus/bus.ts (type)'])
})

t.test('Tower imports from the plugin only what the package exports', async (t) => {
  const entries = publicEntries()
  t.same(entries.sort(), ['lib/client/index.ts', 'lib/index.ts', 'lib/internal.ts', 'lib/redis.ts', 'lib/testing.ts'])
  const reaches = modules
    .filter((m) => m.source.startsWith('lib/tower/'))
    .flatMap((m) => m.dependencies
      .filter((d) => d.resolved.startsWith('lib/') && !d.resolved.startsWith('lib/tower/') && !entries.includes(d.resolved))
      .map((d) => `${m.source} → ${d.resolved}`))
  t.same(reaches, [])
})
