// The tests' TypeScript loader (tap's node-arg, see .taprc). Sucrase strips the types and turns the
// imports into require() calls, as tsc does, with no type check (`npm run typecheck` is that) and no
// TypeScript compiler to warm up in each process: a test process starts in under a second instead of
// three to five through tap's ts-node loader. Its output keeps each export a plain assignment, so the
// coverage report counts the sources' own functions, not getters a transpiler adds.
import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { createRequire, register } from 'node:module'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const require = createRequire(import.meta.url)
const { addHook } = require('pirates')
const { transform, getVersion } = require('sucrase')

// Node 20 runs ES2022 as written: only the types and the module syntax are transformed.
const OPTIONS = { transforms: ['imports', 'typescript'], disableESTransforms: true }
// Each of a suite's hundred-odd processes would transform the same files again: keep each output,
// named by everything it depends on, so a changed file or option is simply a new name.
const CACHE = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', '.cache', 'typescript-tests')
const SALT = JSON.stringify([getVersion(), OPTIONS])

function compile (code, filePath) {
  const key = createHash('sha256').update(SALT).update('\0').update(filePath).update('\0').update(code).digest('hex')
  const cached = path.join(CACHE, `${key}.js`)
  try {
    return readFileSync(cached, 'utf8')
  } catch {}
  const { code: js, sourceMap } = transform(code, { ...OPTIONS, filePath, sourceMapOptions: { compiledFilename: filePath } })
  const output = `${js}\n//# sourceMappingURL=data:application/json;charset=utf-8;base64,${Buffer.from(JSON.stringify(sourceMap)).toString('base64')}`
  // Written aside and renamed: a process reading it beside this one sees all of it or nothing.
  mkdirSync(CACHE, { recursive: true })
  const partial = `${cached}.${process.pid}`
  writeFileSync(partial, output)
  renameSync(partial, cached)
  return output
}

addHook(compile, { exts: ['.ts'] })
// A test file is the entry point, which Node hands to its ES module loader: say it is CommonJS.
register(new URL('./typescript-load.mjs', import.meta.url))

// Tests start servers and CLIs with process.execArgv; tap passes this file relative to the project,
// so name it absolutely for a child that runs elsewhere.
const cwd = pathToFileURL(`${process.cwd()}/`)
process.execArgv = process.execArgv.map((arg) =>
  arg.startsWith('--import=') && new URL(arg.slice('--import='.length), cwd).href === import.meta.url
    ? `--import=${import.meta.url}`
    : arg)
