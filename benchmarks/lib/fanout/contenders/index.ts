import { startBetterSse } from './better-sse'
import type { StartContender } from './contender'
import { startFastifySse } from './fastify-sse'
import { startFastifySseV2 } from './fastify-sse-v2'
import { startRaw } from './raw'
import { startTowerSse } from './tower-sse'
import { startTowerSseMetrics } from './tower-sse-metrics'

/** Every contender by its name in results; `raw` is the baseline every ratio divides by. */
export const CONTENDERS = {
  raw: startRaw,
  'tower-sse': startTowerSse,
  'tower-sse+metrics': startTowerSseMetrics,
  '@fastify/sse': startFastifySse,
  'better-sse': startBetterSse,
  'fastify-sse-v2': startFastifySseV2
} satisfies Record<string, StartContender>

export type ContenderName = keyof typeof CONTENDERS
export const BASELINE: ContenderName = 'raw'
export const CONTENDER_NAMES = Object.keys(CONTENDERS) as ContenderName[]

export function isContenderName (name: string): name is ContenderName {
  return Object.hasOwn(CONTENDERS, name)
}
