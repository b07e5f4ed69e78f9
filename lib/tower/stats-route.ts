import type { FastifyPluginCallback } from 'fastify'
import { StatsWindow, type WindowSnapshot } from './stats-window'
import { sseOf, type SseStats } from '..'
import type { RandomSource } from '../shared/backoff'
import { InstanceBoard, type InstanceStats } from './instances'
import { TOWER_ROUTES } from './routes'
import { withTimeout } from './time-bound'

/**
 * With the Redis bus, `instances` lists every live instance (this one first) with its counts and
 * bus state; left out, with `instancesUnavailable` set, when Redis did not answer in time.
 */
export type TowerStats = SseStats & WindowSnapshot & { instances?: InstanceStats[], instancesUnavailable?: true }

export interface StatsRouteOptions {
  /** The Redis the bus uses: instances report to it once a second. */
  redis?: string
  redisKey: string
  /** The reconnect backoff's random source (the plugin's `random`). */
  random: RandomSource
}

const SAMPLE_EVERY_MS = 1000
/** The instances listing waits this long for Redis; a stalled Redis must not hang the stats route. */
const LIST_TIMEOUT_MS = 500

/**
 * GET /api/events/stats: the plugin's counters plus connects and rejects over the last minute,
 * sampled once a second by one unref'd timer that onClose clears.
 */
export const statsRoute: FastifyPluginCallback<StatsRouteOptions> = (fastify, options, done) => {
  const recent = new StatsWindow(() => sseOf(fastify).stats())
  const board = options.redis === undefined ? null : new InstanceBoard(options.redis, options.redisKey, () => sseOf(fastify).stats(), options.random)
  const timer = setInterval(() => {
    recent.sample()
    board?.report().catch(() => undefined)
  }, SAMPLE_EVERY_MS).unref()
  fastify.addHook('onClose', (_instance, hookDone) => {
    clearInterval(timer)
    if (board === null) hookDone()
    else board.close().then(() => hookDone(), hookDone)
  })

  fastify.get<{ Reply: TowerStats }>(TOWER_ROUTES.stats, async (_request, reply) => {
    void reply.header('cache-control', 'no-store')
    const stats: TowerStats = { ...sseOf(fastify).stats(), ...recent.snapshot() }
    if (board !== null) {
      const listed = await withTimeout(board.list(), LIST_TIMEOUT_MS)
      if (listed === undefined) stats.instancesUnavailable = true
      else stats.instances = listed
    }
    return stats
  })
  done()
}
