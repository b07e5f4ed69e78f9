import t from 'tap'
import towerSse, { errorCodes, REFUSAL_CODES } from '../lib'
import { StreamStats } from '../lib/observe/stats'
import type { Subscriber } from '../lib/streams/subscriber'
import { Registry } from '../lib/streams/registry'
import * as plugin from '../lib'
import * as towerErrors from '../lib/tower/errors'

t.test('every error constructor is exported under its own code, with a status code', async (t) => {
  const codes = Object.keys(errorCodes)
  t.ok(codes.length >= 10)
  for (const [code, ErrorClass] of Object.entries(errorCodes)) {
    t.ok(code.startsWith('TOWER_'), code)
    const error = new (ErrorClass as unknown as new (...args: string[]) => Error & { code: string, statusCode: number })('a', 'b', 'c')
    t.match(error, { code, statusCode: Number }, code)
  }
  t.same(codes.filter((code) => !code.startsWith('TOWER_SSE_')), [], 'the plugin\'s are all TOWER_SSE_*: Tower\'s are not the plugin\'s')
  t.same(Object.values(REFUSAL_CODES).sort(), ['TOWER_SSE_BUS_DEAF', 'TOWER_SSE_CAPACITY', 'TOWER_SSE_CLOSING', 'TOWER_SSE_LOG_UNAVAILABLE', 'TOWER_SSE_PER_KEY', 'TOWER_SSE_PIPELINED', 'TOWER_SSE_PRESSURE', 'TOWER_SSE_RATE'])
})

const { TOWER_SSE_OPTION: TowerSseOptionError, TOWER_SSE_BAD_SUBSCRIPTION: SubscriptionError, TOWER_SSE_REGISTRY_FULL: RegistryFullError } = errorCodes

t.test('errors are Fastify errors: code, statusCode, instanceof, and the option error keeps .option', async (t) => {
  const option = new TowerSseOptionError('maxClients', -1, 'an integer >= 1')
  t.match(option, { code: 'TOWER_SSE_OPTION', option: 'maxClients', name: 'TowerSseOptionError', message: 'tower-sse: option "maxClients" must be an integer >= 1, got -1' })
  t.type(option, TypeError)
  t.type(option, errorCodes.TOWER_SSE_OPTION)
  t.match(new SubscriptionError('topics must be a list'), { code: 'TOWER_SSE_BAD_SUBSCRIPTION', statusCode: 400, message: 'tower-sse: topics must be a list' })
  t.equal(typeof towerSse, 'function')
})

t.test('the registry refuses to hold one stream too many (an invariant admission keeps)', async (t) => {
  const registry = new Registry(0, new StreamStats())
  t.throws(() => registry.add({} as Subscriber), RegistryFullError)
  t.throws(() => registry.add({} as Subscriber), { code: 'TOWER_SSE_REGISTRY_FULL' })
})

t.test('Tower\'s errors are Tower\'s: TOWER_* codes, in lib/tower/errors.ts, not exported by the plugin', async (t) => {
  const names = Object.keys(towerErrors)
  t.same(names.sort(), ['NotifyValidationError', 'StatsWindowError', 'TowerConfigError', 'TowerCrossSiteError', 'TowerHostNotAllowedError',
    'TowerMetricsUnavailableError', 'TowerTokenRequiredError'])
  for (const [name, ErrorClass] of Object.entries(towerErrors)) {
    const error = new (ErrorClass as unknown as new (...args: string[]) => Error & { code: string, statusCode: number })('a')
    t.match(error.code, /^TOWER_(?!SSE_)/, `${name}: ${error.code}`)
    t.notOk(name in plugin, `${name} is not exported by the plugin`)
  }
})
