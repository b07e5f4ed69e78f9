import type { FastifyInstance } from 'fastify'
import towerSse, { type TowerSseOptions } from '../../../../lib'
import type { BenchEvent } from '../payload'
import { STREAM_PATH, type ContenderOptions, type ContenderServer, type StartContender } from './contender'
import { benchFastify, listenOnLoopback } from './fastify-app'

// Longest timer Node allows: no heartbeat and no summary log inside a measurement window.
const NEVER_MS = 2 ** 31 - 1

/**
 * tower-sse as its README registers it, with the cap and byte budget opened up for the load
 * and its timers (heartbeat, max age, summary log) out of the way, as for every contender.
 */
export const startTowerSse: StartContender = (options) => startTowerSseWith(options)

/** tower-sse as above, with `extra` options and routes (the metrics contender). */
export async function startTowerSseWith (
  { maxClients, heartbeatMs }: ContenderOptions, extra: TowerSseOptions = {}, routes: (app: FastifyInstance) => Promise<void> = async () => {}
): Promise<ContenderServer> {
  const app = benchFastify()
  await routes(app)
  await app.register(towerSse, {
    ...extra,
    path: STREAM_PATH,
    maxClients,
    maxBufferedBytes: 64 * 1024 * 1024,
    heartbeatMs: heartbeatMs ?? NEVER_MS,
    maxAgeMs: 0,
    logIntervalMs: NEVER_MS
  })
  const port = await listenOnLoopback(app)
  return {
    port,
    size: () => app.sse.size,
    broadcast: (event: BenchEvent) => { void app.sse.broadcast(event) },
    stats: () => app.sse.stats(),
    close: () => app.close()
  }
}
