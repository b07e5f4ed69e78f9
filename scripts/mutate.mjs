#!/usr/bin/env node
/**
 * A repeatable mutation run over the code whose breakage tests must see (scripts/mutants.mjs lists
 * the mutants: operator swaps, boundary changes, dropped statements). Each mutant is applied alone
 * to a copy of the project in a temporary directory (node_modules linked), the test files named for
 * it run there with a time bound, and the copy is put back before the next one: the project's own
 * sources are never written, so Ctrl-C, a crash or a hung test leave nothing to restore. A test run
 * that fails (or times out) kills the mutant; one that passes lets it survive.
 *
 *   npm run mutate                       # every mutant (CPU-heavy: tens of minutes on 2 cores)
 *   npm run mutate -- --only redis       # the mutants whose id contains "redis"
 *   npm run mutate -- --list             # what would run, nothing run
 *   MUTATE_TIMEOUT_S=120 npm run mutate  # the bound per mutant (default 90 s)
 *
 * Prints one line per mutant, then killed / survived / score over the non-equivalent mutants (and for
 * lib/bus, lib/admission and the registry apart);
 * exits 1 when a mutant survived or a mutant's text is no longer in its file (the list went stale).
 */
import { spawn, execFileSync } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { MUTANTS } from './mutants.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const args = process.argv.slice(2)
const only = args.includes('--only') ? args[args.indexOf('--only') + 1] : undefined
const timeoutMs = Number(process.env.MUTATE_TIMEOUT_S ?? 90) * 1000
/** Scored apart as well: the bus, admission and the registry of open streams. */
const AREAS = ['lib/bus/', 'lib/admission/', 'lib/streams/registry.ts']

/** Where `find` sits in `text`: the 1-based line, or why the mutant cannot be applied. */
function locate (text, find) {
  const at = text.indexOf(find)
  if (at === -1) return { error: 'text not found' }
  if (text.indexOf(find, at + 1) !== -1) return { error: 'text found more than once' }
  return { at, line: text.slice(0, at).split('\n').length }
}

/** The project as git sees it (tracked and new files, not ignored ones), with node_modules linked. */
function copyProject () {
  const dir = mkdtempSync(join(tmpdir(), 'tower-sse-mutate-'))
  const files = execFileSync('git', ['ls-files', '-co', '--exclude-standard', '-z'], { cwd: root, encoding: 'utf8' }).split('\0')
    // node_modules is linked below (a work tree whose node_modules is itself a link lists it as a file).
    .filter((file) => file !== '' && file !== 'node_modules')
  for (const file of files) {
    try {
      mkdirSync(dirname(join(dir, file)), { recursive: true })
      cpSync(join(root, file), join(dir, file))
    } catch (error) {
      // A file deleted in the work tree but not yet in git's index is simply not there.
      if (error.code !== 'ENOENT') throw error
    }
  }
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir')
  return dir
}

/** Runs tap on `tests` inside `dir` within `boundMs`; resolves 'killed' (failed), 'timeout' or 'survived'. */
function runTests (dir, tests, boundMs = timeoutMs) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(root, 'node_modules/tap/dist/esm/run.mjs'), '--disable-coverage', '--jobs=1', '--reporter=silent', ...tests],
      { cwd: dir, stdio: 'ignore', detached: true })
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      // The whole group: tap, its test processes and any redis-server they started.
      try { process.kill(-child.pid, 'SIGKILL') } catch {}
    }, boundMs)
    running = child
    child.once('exit', (code) => {
      clearTimeout(timer)
      running = null
      resolve(timedOut ? 'timeout' : code === 0 ? 'survived' : 'killed')
    })
  })
}

let running = null
let workDir = null
function cleanUp () {
  if (running !== null) { try { process.kill(-running.pid, 'SIGKILL') } catch {} }
  if (workDir !== null) rmSync(workDir, { recursive: true, force: true })
  workDir = null
}
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    cleanUp()
    process.exit(130)
  })
}
process.on('exit', cleanUp)

const selected = MUTANTS.filter((m) => only === undefined || m.id.includes(only) || m.file.includes(only))
const results = []
const started = Date.now()
if (!args.includes('--list')) {
  workDir = copyProject()
  // Unmutated, the tests must pass: otherwise every mutant would count as killed.
  const baseline = [...new Set(selected.filter((m) => m.equivalent === undefined).flatMap((m) => m.tests))]
  // Every file in one run, one at a time: the bound is a mutant's per file (one mutant's never fits them all).
  const unmutated = baseline.length === 0 ? 'survived' : await runTests(workDir, baseline, timeoutMs * baseline.length)
  if (unmutated !== 'survived') {
    console.error(`the unmutated sources ${unmutated === 'timeout' ? 'time out' : 'fail'} their tests (${baseline.join(' ')}): fix that first`)
    process.exit(2)
  }
  console.log(`baseline: ${baseline.length} test files pass unmutated (${((Date.now() - started) / 1000).toFixed(0)} s)`)
}
for (const mutant of selected) {
  const original = readFileSync(join(root, mutant.file), 'utf8')
  const where = locate(original, mutant.find)
  const label = `${mutant.id} ${mutant.file}:${where.line ?? '?'}`
  if (where.error !== undefined) {
    results.push({ mutant, result: 'stale' })
    console.log(`STALE     ${label}: ${where.error}: ${JSON.stringify(mutant.find)}`)
    continue
  }
  if (mutant.equivalent !== undefined) {
    results.push({ mutant, result: 'equivalent' })
    console.log(`EQUIV     ${label}: ${mutant.equivalent}`)
    continue
  }
  if (args.includes('--list')) {
    console.log(`          ${label} -> ${mutant.tests.join(' ')}`)
    continue
  }
  const target = join(workDir, mutant.file)
  const mutated = original.slice(0, where.at) + mutant.replace + original.slice(where.at + mutant.find.length)
  const t0 = Date.now()
  writeFileSync(target, mutated)
  let result
  try {
    result = await runTests(workDir, mutant.tests)
  } finally {
    writeFileSync(target, original)
  }
  results.push({ mutant, result })
  const shown = result === 'survived' ? 'SURVIVED' : result === 'timeout' ? 'killed(t)' : 'killed'
  console.log(`${shown.padEnd(10)}${label} (${((Date.now() - t0) / 1000).toFixed(0)} s) ${mutant.tests.join(' ')}`)
}
if (args.includes('--list')) process.exit(0)
cleanUp()

const count = (...kinds) => results.filter((r) => kinds.includes(r.result)).length
const killed = count('killed', 'timeout')
const survived = count('survived')
const stale = count('stale')
const run = killed + survived
console.log(`\n${run} run, ${killed} killed, ${survived} survived, ${count('equivalent')} equivalent (not run), ${stale} stale` +
  ` in ${((Date.now() - started) / 60000).toFixed(1)} min`)
console.log(`score: ${run === 0 ? 'n/a' : (100 * killed / run).toFixed(1)}% of non-equivalent mutants killed`)
// The areas whose score is held apart from the whole list's (docs/development.md).
for (const area of AREAS) {
  const inArea = results.filter((r) => r.mutant.file.startsWith(area))
  const areaKilled = inArea.filter((r) => r.result === 'killed' || r.result === 'timeout').length
  const areaRun = areaKilled + inArea.filter((r) => r.result === 'survived').length
  if (areaRun > 0) console.log(`  ${area}: ${areaKilled} of ${areaRun} killed (${(100 * areaKilled / areaRun).toFixed(1)}%)`)
}
for (const { mutant } of results.filter((r) => r.result === 'survived')) console.log(`survived: ${mutant.id} ${mutant.file}: ${mutant.why}`)
process.exit(survived === 0 && stale === 0 ? 0 : 1)
