// `npm run build` (or `node scripts/build.mjs OUT_DIR`): the package's dist/ from nothing — the
// plugin, Tower and the client (CommonJS + .d.ts), the client's browser build, and Tower's
// dashboard assets with uPlot's browser files, so the published `tower` bin runs on its own.
import { execFileSync } from 'node:child_process'
import { cpSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const out = path.resolve(process.argv[2] ?? path.join(root, 'dist'))
const require = createRequire(import.meta.url)
const tsc = require.resolve('typescript/bin/tsc')

// Stale files of an earlier build must not be published.
rmSync(out, { recursive: true, force: true })
const compile = (project, outDir) =>
  execFileSync(process.execPath, [tsc, '-p', path.join(root, project), '--outDir', outDir], { cwd: root, stdio: 'inherit' })
compile('tsconfig.build.json', out)
compile('tsconfig.client-esm.json', path.join(out, 'client-esm'))

cpSync(path.join(root, 'lib', 'tower', 'public'), path.join(out, 'tower', 'public'), { recursive: true })
// uPlot is only the dashboard's chart: shipped as files, not as a dependency of every plugin user.
const uplot = path.dirname(require.resolve('uplot/package.json'))
for (const file of ['dist/uPlot.esm.js', 'dist/uPlot.min.css', 'LICENSE']) {
  cpSync(path.join(uplot, file), path.join(out, 'tower', 'vendor', 'uplot', path.basename(file)))
}
