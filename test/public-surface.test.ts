import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import * as client from '../lib/client'

// The package's documented entries export what the README and the docs document and nothing more,
// a surface a person can read: at most 30 values at the root, every error through `errorCodes`.

/**
 * A module's exports as `require()` hands them over: its own enumerable properties. For the plugin
 * that is the function lib/index.ts's last line puts in module.exports, with every named export
 * copied onto it (enumerable) and fastify-plugin's `default`/`towerSse`. Not `import * as`: what a
 * namespace built from a CommonJS function holds depends on who compiled this file. Sucrase's
 * helper copies the enumerable properties; TypeScript's `__importStar` (5.7+, what tap's ts-node
 * loader emits on tap's first run after its plugin build changes, e.g. after `npm ci`) copies every
 * own property name, the function's non-enumerable `length` and `name` included.
 */
function exportsOf (id: string): Record<string, unknown> {
  return require(id) as Record<string, unknown>
}
const plugin = exportsOf('../lib')
const redis = exportsOf('../lib/redis')

const docs = path.join(__dirname, '..', 'docs')
const readme = [path.join(__dirname, '..', 'README.md'), ...readdirSync(docs).filter((f) => f.endsWith('.md')).map((f) => path.join(docs, f))]
  .map((file) => readFileSync(file, 'utf8')).join('\n')
const named = (name: string): boolean => readme.includes(`\`${name}\``) || new RegExp(`\\b${name}\\b`).test(readme)

t.test('every value tower-sse exports is documented: by name, or an error class whose code has its row', async (t) => {
  t.equal(typeof plugin, 'function', 'require(\'tower-sse\') is the plugin itself')
  const codeOf = new Map(Object.entries(plugin.errorCodes as Record<string, unknown>).map(([code, error]) => [error, code]))
  const undocumented = Object.keys(plugin)
    .filter((name) => name !== 'default' && name !== '__esModule')
    .filter((name) => !named(name) && !(codeOf.has(plugin[name]) && readme.includes(`\`${codeOf.get(plugin[name])}\``)))
  t.same(undocumented, [])
  const values = Object.keys(plugin).filter((name) => name !== '__esModule' && name !== 'default' && typeof plugin[name] !== 'undefined')
  t.ok(values.length <= 30, `${values.length} value exports at the root, at most 30: ${values.join(', ')}`)
  t.notOk(Object.keys(plugin).some((name) => name.endsWith('Error')), 'no error class by name: errors through errorCodes')
  for (const internal of ['normalizeOptions', 'IDEMPOTENCY_KEY', 'isValidTopic', 'parseHost', 'parseRedisUrl', 'redactRedisUrl', 'encodeEvent']) {
    t.notOk(internal in plugin, `${internal} is not a root export`)
  }
})

t.test('tower-sse/redis is the connection from a URL; tower-sse/client lends no policy to server code', async (t) => {
  t.same(Object.keys(redis).filter((name) => name !== '__esModule'), ['createRedisConnection'])
  for (const name of ['backoffDelayMs', 'jitterUpMs', 'classifyResponse', 'parseRetryAfterMs']) t.notOk(name in client, `${name} is not a client export`)
})
