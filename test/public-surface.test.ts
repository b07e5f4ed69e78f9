import { readFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import * as client from '../lib/client'
import * as plugin from '../lib'
import * as redis from '../lib/redis'

// The package's documented entries export what the README documents and nothing more: what Tower
// needs beyond that goes through the undocumented `tower-sse/internal`.

const readme = readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8')
const named = (name: string): boolean => readme.includes(`\`${name}\``) || new RegExp(`\\b${name}\\b`).test(readme)

t.test('every value tower-sse exports is in the README: by name, or an error class whose code has its row', async (t) => {
  const codeOf = new Map(Object.entries(plugin.errorCodes).map(([code, error]) => [error as unknown, code]))
  const undocumented = Object.keys(plugin)
    .filter((name) => name !== 'default' && name !== '__esModule')
    .filter((name) => !named(name) && !(codeOf.has((plugin as Record<string, unknown>)[name]) && readme.includes(`\`${codeOf.get((plugin as Record<string, unknown>)[name])}\``)))
  t.same(undocumented, [])
  for (const internal of ['normalizeOptions', 'IDEMPOTENCY_KEY', 'isValidTopic', 'parseHost', 'parseRedisUrl', 'redactRedisUrl', 'encodeEvent']) {
    t.notOk(internal in plugin, `${internal} is not a root export`)
  }
})

t.test('tower-sse/redis is the connection from a URL; tower-sse/client lends no policy to server code', async (t) => {
  t.same(Object.keys(redis).filter((name) => name !== '__esModule'), ['createRedisConnection'])
  for (const name of ['backoffDelayMs', 'jitterUpMs', 'classifyResponse', 'parseRetryAfterMs']) t.notOk(name in client, `${name} is not a client export`)
})
