// `npm run build` (or `node scripts/build.mjs OUT_DIR`): the package's dist/ from nothing — the
// plugin, Tower and the client (CommonJS + .d.ts), the client's browser build, and Tower's
// dashboard assets with uPlot's browser files, so the published `tower` bin runs on its own.
import { spawn } from 'node:child_process'
import { cpSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { DIST, inputsHash, writeStamp } from './build-stamp.mjs'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const out = path.resolve(process.argv[2] ?? path.join(root, 'dist'))
const require = createRequire(import.meta.url)
const tsc = require.resolve('typescript/bin/tsc')
const ts = require('typescript')

// The inputs as this build reads them: a source changed while it runs leaves the stamp stale.
const inputs = out === DIST ? inputsHash() : null
// Stale files of an earlier build must not be published.
rmSync(out, { recursive: true, force: true })
const compile = (project, outDir) => new Promise((resolve, reject) => {
  spawn(process.execPath, [tsc, '-p', path.join(root, project), '--outDir', outDir], { cwd: root, stdio: 'inherit' })
    .on('error', reject)
    .on('exit', (code, signal) => code === 0 ? resolve() : reject(new Error(`build: tsc -p ${project} failed (${signal ?? `exit ${code}`})`)))
})
// Side by side: two programs, one per core, written to separate folders (client-esm/ is not in lib/).
const compiled = await Promise.allSettled([compile('tsconfig.build.json', out), compile('tsconfig.client-esm.json', path.join(out, 'client-esm'))])
const failed = compiled.find((result) => result.status === 'rejected')
if (failed !== undefined) {
  console.error(failed.reason.message)
  process.exit(1)
}
// Node reads the browser build as ES modules too: `import` of tower-sse/client resolves there.
writeFileSync(path.join(out, 'client-esm', 'package.json'), '{ "type": "module" }\n')
exportEquals(out)

cpSync(path.join(root, 'lib', 'tower', 'public'), path.join(out, 'tower', 'public'), { recursive: true })
// uPlot is only the dashboard's chart: shipped as files, not as a dependency of every plugin user.
const uplot = path.dirname(require.resolve('uplot/package.json'))
for (const file of ['dist/uPlot.esm.js', 'dist/uPlot.min.css', 'LICENSE']) {
  cpSync(path.join(uplot, file), path.join(out, 'tower', 'vendor', 'uplot', path.basename(file)))
}
// What `npm test` reads to skip a build that would change nothing (scripts/pretest.mjs).
if (inputs !== null) writeStamp(inputs)

/**
 * dist/index.d.ts as `export =`, the shape of every official Fastify plugin's types: index.js is
 * CommonJS whose module.exports is the plugin itself, and a CommonJS .d.ts with `export default`
 * would tell TypeScript that `import towerSse from 'tower-sse'` under NodeNext/Node16 (and
 * `require('tower-sse')` in checked JS) is the module object, which register() refuses (TS2769).
 * tsc's own declarations move to index-exports.d.ts; every export stays reachable by name as a member of the
 * plugin's namespace, `default` included.
 */
function exportEquals (dir) {
  const api = path.join(dir, 'index-exports.d.ts')
  renameSync(path.join(dir, 'index.d.ts'), api)
  const program = ts.createProgram([api], { noEmit: true, skipLibCheck: true, types: [], module: ts.ModuleKind.Node16, moduleResolution: ts.ModuleResolutionKind.Node16 })
  const checker = program.getTypeChecker()
  const symbols = checker.getExportsOfModule(checker.getSymbolAtLocation(program.getSourceFile(api)))
  const names = symbols.map((symbol) => symbol.name)
  if (!names.includes('default') || !names.includes('towerSse')) throw new Error(`build: ${api} lost its plugin export (${names.join(', ')})`)
  // An import alias cannot name an `export type`: a type without a value is re-declared as an
  // alias of it (a generic one would lose its parameters, so the build refuses it instead).
  const member = (symbol) => {
    const target = checker.getAliasedSymbol(symbol)
    if (target.flags & ts.SymbolFlags.Value) return `  export import ${symbol.name} = api.${symbol.name}`
    if (target.declarations?.some((declaration) => declaration.typeParameters !== undefined)) {
      throw new Error(`build: the generic type ${symbol.name} needs its parameters spelled out in exportEquals`)
    }
    return `  export type ${symbol.name} = api.${symbol.name}`
  }
  writeFileSync(path.join(dir, 'index.d.ts'), [
    '// Written by scripts/build.mjs from index-exports.d.ts (tsc\'s declarations): see exportEquals there.',
    "import api = require('./index-exports')",
    '/** The tower-sse Fastify plugin: `app.register(towerSse, options)`. */',
    'declare function towerSse (...args: Parameters<typeof api.towerSse>): ReturnType<typeof api.towerSse>',
    'declare namespace towerSse {',
    ...symbols.filter(({ name }) => name !== 'default' && name !== 'towerSse').map(member),
    '  export { towerSse, towerSse as default }',
    '}',
    'export = towerSse',
    ''
  ].join('\n'))
}
