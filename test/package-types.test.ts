// TypeScript as users compile it, against the packed tarball: the README's quick start and the
// client under each module setting a project may have, with skipLibCheck off and none of the
// optional peers (ioredis, prom-client, @fastify/under-pressure) installed. One install for all.
import { execFile } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { packAndInstall } from './fixtures/packed'

const run = promisify(execFile)
const TSC = require.resolve('typescript/bin/tsc')
const FIXTURES = path.join(__dirname, 'fixtures', 'package', 'types')
const COMMON = ['--strict', '--noEmit', '--skipLibCheck', 'false', '--target', 'es2022', '--types', 'node']

// [setting, tsc options, files]: each fixture also holds a @ts-expect-error, so types that
// collapsed to `any` fail the compile too.
const SETTINGS: Array<[string, string[], string[]]> = [
  ['NodeNext ESM (import towerSse from \'tower-sse\')', ['--module', 'nodenext', '--moduleResolution', 'nodenext'], ['app.mts']],
  ['Node16 CommonJS: import = require, and // @ts-check JavaScript', ['--module', 'node16', '--moduleResolution', 'node16', '--allowJs', '--checkJs'], ['app.cts', 'app.cjs']],
  ['bundler', ['--module', 'esnext', '--moduleResolution', 'bundler'], ['app.mts']],
  ['node10 (typesVersions for tower-sse/client)', ['--module', 'commonjs', '--moduleResolution', 'node10', '--esModuleInterop'], ['legacy.ts']]
]

const dir = mkdtempSync(path.join(os.tmpdir(), 'tower-sse-types-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))

t.test('the packed types compile in a user\'s project', async (t) => {
  const { app } = await packAndInstall(dir, ['@types/node@^20'])
  cpSync(FIXTURES, app, { recursive: true })
  for (const peer of ['ioredis', 'prom-client', '@fastify/under-pressure']) {
    t.equal(existsSync(path.join(app, 'node_modules', peer)), false, `${peer} is not installed`)
  }
  // Side by side: each compile is one process reading the same fastify types.
  const compiled = await Promise.all(SETTINGS.map(([, options, files]) =>
    run(process.execPath, [TSC, ...COMMON, ...options, ...files], { cwd: app }).then(() => '', (err: { stdout: string }) => err.stdout)))
  SETTINGS.forEach(([setting], i) => t.equal(compiled[i], '', setting))
})
