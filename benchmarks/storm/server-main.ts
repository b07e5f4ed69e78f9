/**
 * One server under test, in its own process: `server-main <setup> <options JSON> [port]`. It listens
 * on loopback, on `port` (a restart takes over its predecessor's) or an ephemeral one and answers its runner over IPC: `port`, `stats`, `stop`.
 */
import { openSync, writeSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import Fastify, { LogController } from 'fastify'
import { serveIpc } from '../lib/ipc'
import { EVENTS_PATH, type ServerSetup } from './servers/contract'
import { setupBare503 } from './servers/bare-503'
import { setupLegacy } from './servers/legacy'
import { setupTowerSse } from './servers/tower-sse'
import { setupUpstreamFix } from './servers/upstream-fix'
import type { ServerSetupName } from './servers'
import type { ServerStats } from './stats'

const SETUPS: Record<ServerSetupName, ServerSetup> = {
  legacy: setupLegacy,
  'upstream-fix': setupUpstreamFix,
  'tower-sse': setupTowerSse,
  'bare-503': setupBare503
}

function parseArgs (argv: string[]): { setup: ServerSetup, options: Record<string, unknown>, port: number } {
  const [name, json = '{}', portText = '0'] = argv
  const port = Number(portText)
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`server-main: port must be 0-65535, got ${portText}`)
  if (!Object.hasOwn(SETUPS, name)) throw new Error(`server-main: unknown server "${name}"; known: ${Object.keys(SETUPS).join(', ')}`)
  const options: unknown = JSON.parse(json)
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new Error(`server-main: options must be a JSON object, got ${json}`)
  }
  return { setup: SETUPS[name as ServerSetupName], options: options as Record<string, unknown>, port }
}

async function main (): Promise<void> {
  const { setup, options, port } = parseArgs(process.argv.slice(2))
  // Every log line is counted, then written where a production log would cost a write: /dev/null.
  const sink = openSync('/dev/null', 'w')
  let logLines = 0
  const app = Fastify({
    logger: {
      level: 'info',
      stream: {
        write (line: string) {
          for (let i = line.indexOf('\n'); i !== -1; i = line.indexOf('\n', i + 1)) logLines++
          writeSync(sink, line)
        }
      }
    },
    // Fastify's own per-request lines would bury the difference the servers make themselves.
    logController: new LogController({ disableRequestLogging: true }),
    // Stopping must not wait on a stream some client still holds open.
    forceCloseConnections: true
  })
  let connects = 0
  let tcpConnects = 0
  app.server.on('connection', () => { tcpConnects++ })
  app.server.on('request', (request) => {
    if (request.url?.startsWith(EVENTS_PATH) === true) connects++
  })
  const counts = await setup(app, options)
  const listening = app.listen({ host: '127.0.0.1', port }).then(() => {
    const address = app.server.address()
    if (address === null || typeof address === 'string') throw new Error('server-main: expected a TCP address')
    return address.port
  })
  const stats = (): ServerStats => {
    const elu = performance.eventLoopUtilization()
    return {
      at: Date.now(),
      connects,
      tcpConnects,
      ...counts(),
      logLines,
      maxRssBytes: process.resourceUsage().maxRSS * 1024,
      elu: { idle: elu.idle, active: elu.active }
    }
  }
  serveIpc('server-main', {
    port: async () => await listening,
    stats,
    // Closing may write a last log line (tower-sse's summary), so the final count comes after it.
    stop: async () => {
      await app.close()
      return stats()
    }
  })
}

main().catch((error: unknown) => {
  console.error(error)
  process.exit(1)
})
