import type { FastifyPluginCallback } from 'fastify'
import { StatsWindow, type WindowSnapshot } from './stats-window'
import type { SseStats } from '../registry'
import { TOWER_ROUTES } from './routes'

export type TowerStats = SseStats & WindowSnapshot

const SAMPLE_EVERY_MS = 1000

/**
 * GET /api/events/stats: the plugin's counters plus connects and rejects over the last minute,
 * sampled once a second by one unref'd timer that onClose clears.
 */
export const statsRoute: FastifyPluginCallback = (fastify, _options, done) => {
  const recent = new StatsWindow(() => fastify.sse.stats())
  const timer = setInterval(() => recent.sample(), SAMPLE_EVERY_MS).unref()
  fastify.addHook('onClose', (_instance, hookDone) => {
    clearInterval(timer)
    hookDone()
  })

  fastify.get<{ Reply: TowerStats }>(TOWER_ROUTES.stats, async (_request, reply) => {
    void reply.header('cache-control', 'no-store')
    return { ...fastify.sse.stats(), ...recent.snapshot() }
  })
  done()
}
