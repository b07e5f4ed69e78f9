import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import * as client from '../lib/client'
import * as plugin from '../lib'
import * as redis from '../lib/redis'

// The package's documented entries export what the README and the docs document and nothing more,
// a surface a person can read: at most 30 values at the root, every error through `errorCodes`.

const docs = path.join(__dirname, '..', 'docs')
const readme = [path.join(__dirname, '..', 'README.md'), ...readdirSync(docs).filter((f) => f.endsWith('.md')).map((f) => path.join(docs, f))]
  .map((file) => readFileSync(file, 'utf8')).join('\n')
const named = (name: string): boolean => readme.includes(`\`${name}\``) || new RegExp(`\\b${name}\\b`).test(readme)

t.test('every value tower-sse exports is documented: by name, or an error class whose code has its row', async (t) => {
  const codeOf = new Map(Object.entries(plugin.errorCodes).map(([code, error]) => [error as unknown, code]))
  const undocumented = Object.keys(plugin)
    .filter((name) => name !== 'default' && name !== '__esModule')
    .filter((name) => !named(name) && !(codeOf.has((plugin as Record<string, unknown>)[name]) && readme.includes(`\`${codeOf.get((plugin as Record<string, unknown>)[name])}\``)))
  t.same(undocumented, [])
  const values = Object.keys(plugin).filter((name) => name !== '__esModule' && name !== 'default' && typeof (plugin as Record<string, unknown>)[name] !== 'undefined')
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
