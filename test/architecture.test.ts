/**
 * The module map (docs/architecture.md's table of lib/'s files) and its rules, checked against the
 * files on disk and the real dependency graph (dependency-cruiser, with TypeScript's type-only
 * imports included): a row for every file, imports pointing down the table, no import cycle in
 * lib/, and Tower (lib/tower/) using the plugin only through the package's entries. And in
 * benchmarks/: each bench imports only its own folder and the shared harness (benchmarks/lib/),
 * which imports no bench.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
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
  type Target = string | { default: Target }
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { exports: Record<string, Target> }
  // The CommonJS build of each entry: its `default` condition, nested or not.
  const main = (target: Target): string => typeof target === 'string' ? target : main(target.default)
  return Object.values(pkg.exports)
    .map(main)
    .filter((target) => target.startsWith('./dist/'))
    .map((target) => target.replace(/^\.\/dist\//, 'lib/').replace(/\.js$/, '.ts'))
}

/** The table's files, top to bottom. */
function mapRows (): string[] {
  const doc = readFileSync(path.join(root, 'docs', 'architecture.md'), 'utf8')
  return [...doc.matchAll(/^\| `(lib\/[^`]+\.ts)` \|/gm)].map((match) => match[1])
}

function filesOnDisk (dir = 'lib'): string[] {
  return readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const file = `${dir}/${entry.name}`
    if (entry.isDirectory()) return filesOnDisk(file)
    return file.endsWith('.ts') ? [file] : []
  })
}

/** A file's layer: its top folder in lib/ (lib/bus/redis/ is the bus's), or itself for a file at lib/'s root. */
function layerOf (file: string): string {
  const parts = file.split('/')
  return parts.length === 2 ? file : `${parts[0]}/${parts[1]}/`
}

const modules = cruise()
const rows = mapRows()
const layers = [...new Set(rows.map(layerOf))]

t.test('docs/architecture.md has a row for every lib/ file, and a file for every row', async (t) => {
  t.same(rows.filter((row, i) => rows.indexOf(row) !== i), [], 'no file has two rows')
  const files = filesOnDisk()
  t.same(files.filter((file) => !rows.includes(file)).sort(), [], 'files without a row')
  t.same(rows.filter((row) => !files.includes(row)), [], 'rows without a file')
})

t.test('the table lists each layer\'s files together, so the table is an order of layers', async (t) => {
  const split = layers.filter((layer) => {
    const at = rows.flatMap((row, i) => layerOf(row) === layer ? [i] : [])
    return at[at.length - 1] - at[0] !== at.length - 1
  })
  t.same(split, [])
  t.ok(layers.length > 10, layers.join(' > '))
})

t.test('imports point down the table: a file imports its own layer or one below, never one above', async (t) => {
  const up = modules.flatMap((m) => m.dependencies
    .filter((d) => d.resolved.startsWith('lib/') && layerOf(d.resolved) !== layerOf(m.source))
    .filter((d) => layers.indexOf(layerOf(d.resolved)) < layers.indexOf(layerOf(m.source)))
    .map((d) => `${m.source} → ${d.resolved}`))
  t.same(up, [], 'no exception: a concern names only its own options\' types')
  t.ok(modules.some((m) => m.source === 'lib/options.ts' && m.dependencies.some((d) => d.resolved === 'lib/admission/admission-options.ts')), 'options.ts composes the concerns\' parsers')
})

t.test('the graph is read with type-only imports (a cycle through types counts)', async (t) => {
  t.ok(modules.length > 40, `${modules.length} modules in lib/`)
  const hub = modules.find((m) => m.source === 'lib/streams/hub.ts')
  t.ok(hub?.dependencies.some((d) => d.resolved === 'lib/observe/vocabulary.ts' && d.dependencyTypes.includes('type-only')), 'streams/hub.ts → observe/vocabulary.ts, type-only, is in the graph')
})

t.test('no import cycle in lib/', async (t) => {
  const cycles = modules.flatMap((m) => m.dependencies.filter((d) => d.circular).map((d) => `${m.source} → ${d.resolved}`))
  t.same(cycles, [])
})

t.test('the vocabulary is a leaf: lib/observe/vocabulary.ts imports nothing', async (t) => {
  const vocabulary = modules.find((m) => m.source === 'lib/observe/vocabulary.ts')
  t.same(vocabulary?.dependencies.map((d) => d.resolved), [])
})

/**
 * What Tower (lib/tower/) reaches past the package's entries for: helpers the public API need not
 * carry. A new reach fails here until it is named, so Tower stays an app built on the plugin.
 */
const TOWER_REACHES = [
  'lib/admission/request-guard.ts', // host parsing, shared with its own request guard
  'lib/bus/redis/connection.ts', // the instance board's Redis connection, made as the bus makes its own
  'lib/bus/redis/keys.ts',
  'lib/bus/redis/url.ts', // a Redis URL shown without its password
  'lib/errors.ts', // TowerSseOptionError, to name the flag an option came from
  'lib/options.ts', // its flags, checked by the plugin's own normaliser before anything listens
  'lib/shared/backoff.ts',
  'lib/streams/broadcast.ts' // what an idempotency key may hold, checked before a notify is accepted
]

t.test('Tower registers the plugin through its entry and reaches past it only for the helpers named here', async (t) => {
  const entries = publicEntries()
  t.same(entries.sort(), ['lib/client/index.ts', 'lib/index.ts', 'lib/mcp.ts', 'lib/redis.ts', 'lib/testing.ts'])
  const reaches = new Set(modules
    .filter((m) => m.source.startsWith('lib/tower/'))
    .flatMap((m) => m.dependencies
      .filter((d) => d.resolved.startsWith('lib/') && !d.resolved.startsWith('lib/tower/') && !entries.includes(d.resolved))
      .map((d) => d.resolved)))
  t.same([...reaches].sort(), TOWER_REACHES)
  t.ok(modules.some((m) => m.source === 'lib/tower/app.ts' && m.dependencies.some((d) => d.resolved === 'lib/index.ts')), 'the plugin itself from its entry')
})

/**
 * Every relative import of `file` (import, export … from, import(), require()), and every module it
 * starts with spawnSibling(__filename, name), resolved to a repository path.
 */
function relativeImports (file: string): Array<{ spec: string, target: string | null }> {
  const text = readFileSync(path.join(root, file), 'utf8')
  const imports = [...text.matchAll(/(?:\bfrom|^import|\bimport\(|\brequire\()\s*['"](\.{1,2}\/[^'"]*)['"]/gm)].map((match) => match[1])
  const spawned = [...text.matchAll(/\bspawnSibling\(__filename,\s*'([^']+)'/g)].map((match) => match[1].startsWith('.') ? match[1] : `./${match[1]}`)
  return [...imports, ...spawned].map((spec) => {
    const base = path.posix.join(path.posix.dirname(file), spec)
    const target = [`${base}.ts`, `${base}/index.ts`, base].find((candidate) => existsSync(path.join(root, candidate)) && candidate.endsWith('.ts')) ?? null
    return { spec, target }
  })
}

/** The bench folder a benchmarks/ file sits in ('lib' for the shared harness), or null outside benchmarks/. */
function benchOf (file: string): string | null {
  const parts = file.split('/')
  return parts[0] === 'benchmarks' && parts.length > 2 ? parts[1] : null
}

t.test('benchmarks/: a bench imports only its own folder and benchmarks/lib/, and benchmarks/lib/ imports no bench', async (t) => {
  const files = filesOnDisk('benchmarks')
  const imports = files.flatMap((file) => relativeImports(file).map((i) => ({ file, ...i })))
  t.same(imports.filter((i) => i.target === null).map((i) => `${i.file}: '${i.spec}'`), [], 'every relative import resolves to a .ts file')
  const crossings = imports.filter(({ file, target }) => {
    const to = target === null ? null : benchOf(target)
    return to !== null && to !== 'lib' && to !== benchOf(file)
  }).map(({ file, spec, target }) => `${file} imports '${spec}' (${target ?? ''}) from another bench's folder`)
  t.same(crossings, [])
  t.ok(imports.some((i) => benchOf(i.file) === 'scale' && i.target?.startsWith('benchmarks/lib/tower/') === true), 'the benches share the Tower launcher through benchmarks/lib/')
  t.ok(imports.length > 300, `${imports.length} relative imports in ${files.length} files read`)
})
