import { TowerSseOptionError } from '../shared/option-rules'

/**
 * A prom-client Registry (`new Registry()` or `register`), seen structurally so the types need no
 * prom-client (an optional peer dependency); register time checks the same shape.
 */
export interface MetricsRegistryLike {
  registerMetric: (...args: never[]) => unknown
  getSingleMetric: (...args: never[]) => unknown
  removeSingleMetric: (...args: never[]) => unknown
  metrics: (...args: never[]) => unknown
}

// Checked by shape, not instanceof: the application's prom-client may be another copy than ours.
const REGISTRY_METHODS = ['registerMetric', 'getSingleMetric', 'removeSingleMetric', 'metrics'] as const satisfies ReadonlyArray<keyof MetricsRegistryLike>

/** The `metrics` option: a prom-client Registry, or undefined (prom-client is then never loaded). */
export function parseMetricsOption (value: unknown): MetricsRegistryLike | undefined {
  if (value === undefined) return undefined
  const candidate = value as Record<string, unknown> | null
  if (typeof candidate !== 'object' || candidate === null || !REGISTRY_METHODS.every((name) => typeof candidate[name] === 'function')) {
    throw new TowerSseOptionError('metrics', value, 'a prom-client Registry (new Registry() or register)')
  }
  return value as MetricsRegistryLike
}
