// `npm test`'s first step: dist/ as `npm run build` makes it from the sources as they are, and tap
// built for .taprc's plugin list — each skipped when it is already so, since neither would change
// anything then. dist/ is rebuilt unless scripts/build.mjs's stamp says it was built from exactly
// these inputs and is untouched since (scripts/build-stamp.mjs); tap is rebuilt, as `tap` itself
// decides, when the plugin signature its Test class was built with is not .taprc's (tap 21 would
// rebuild on its first run too, but run that suite with the loaders it had, ts-node included, at
// ~2.5× the time). A fresh clone (CI) does both. @tapjs/config and @tapjs/test are devDependencies
// pinned to the versions tap 21 ships with: the same modules tap reads.
import { spawnSync } from 'node:child_process'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { upToDate } from './build-stamp.mjs'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const run = (what, args) => {
  const { status, signal } = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' })
  if (status !== 0) {
    console.error(`pretest: ${what} failed (${signal ?? `exit ${status}`})`)
    process.exit(1)
  }
}

if (upToDate()) console.log('pretest: dist/ is built from the sources as they are (npm run build would change nothing)')
else run('npm run build', [path.join(root, 'scripts', 'build.mjs')])

const { TapConfig } = await import('@tapjs/config')
const { signature } = await import('@tapjs/test')
const config = await TapConfig.load()
if (config.pluginSignature === signature) console.log('pretest: tap is built for .taprc\'s plugins')
else run('tap build', [path.join(root, 'node_modules', 'tap', 'dist', 'esm', 'run.mjs'), 'build'])
