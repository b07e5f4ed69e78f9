// What dist/ was built from, so `npm test` (scripts/pretest.mjs) can tell a build that would change
// nothing: a hash of every input of scripts/build.mjs, and one of dist/ as that build left it, kept
// in node_modules/.cache (never in dist/, which is published).
import { createHash } from 'node:crypto'
import { mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const require = createRequire(import.meta.url)
const STAMP = path.join(root, 'node_modules', '.cache', 'tower-sse-build', 'stamp.json')
export const DIST = path.join(root, 'dist')

/** Every file under `dir` (or `dir` itself, a file), by path and content; null when there is none. */
function hashOf (paths) {
  const hash = createHash('sha256')
  const add = (file) => {
    let entries
    try {
      entries = readdirSync(file, { withFileTypes: true })
    } catch (error) {
      if (error.code === 'ENOENT') return hash.update(`${path.relative(root, file)}\0missing\0`)
      if (error.code !== 'ENOTDIR') throw error
      return hash.update(`${path.relative(root, file)}\0`).update(readFileSync(file)).update('\0')
    }
    for (const entry of entries.sort((a, b) => a.name < b.name ? -1 : 1)) add(path.join(file, entry.name))
  }
  for (const file of paths) add(file)
  return hash.digest('hex')
}

/** The build's inputs: the sources (Tower's assets too), the script, the tsconfigs, and the versions of the compiler and of uPlot it copies. */
export function inputsHash () {
  return hashOf([
    path.join(root, 'lib'),
    path.join(root, 'scripts', 'build.mjs'),
    ...['tsconfig.json', 'tsconfig.build.json', 'tsconfig.client-esm.json'].map((file) => path.join(root, file)),
    require.resolve('typescript/package.json'),
    require.resolve('uplot/package.json')
  ])
}

export function distHash () {
  return hashOf([DIST])
}

/** Written by scripts/build.mjs after a build of dist/ (written aside and renamed: all of it or nothing). */
export function writeStamp (inputs) {
  mkdirSync(path.dirname(STAMP), { recursive: true })
  writeFileSync(`${STAMP}.${process.pid}`, JSON.stringify({ inputs, dist: distHash() }))
  renameSync(`${STAMP}.${process.pid}`, STAMP)
}

/** Whether dist/ is what a build of the inputs as they are now made, untouched since. */
export function upToDate () {
  let stamp
  try {
    stamp = JSON.parse(readFileSync(STAMP, 'utf8'))
  } catch {
    return false
  }
  return stamp.inputs === inputsHash() && stamp.dist === distHash()
}
