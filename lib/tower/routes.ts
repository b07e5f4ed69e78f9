import { FindMyWay } from './router'

/** Tower's own routes beside the event stream, named once for the route modules and the config check. */
export const TOWER_ROUTES = Object.freeze({
  dashboard: '/',
  notify: '/api/notify',
  stats: '/api/events/stats',
  ready: '/api/ready',
  metrics: '/metrics',
  vendor: '/vendor/:name',
  vendorClient: '/vendor/tower-sse-client/:name',
  vendorShared: '/vendor/shared/:name',
  asset: '/:name'
})

const ROUTE_NAMES: Readonly<Record<keyof typeof TOWER_ROUTES, string>> = {
  dashboard: 'the dashboard page',
  notify: 'the notify route',
  stats: 'the stats route',
  ready: 'the readiness route',
  metrics: 'the metrics route',
  vendor: 'the dashboard\'s vendor modules (/vendor/:name)',
  vendorClient: 'the browser client\'s modules (/vendor/tower-sse-client/:name)',
  vendorShared: 'the browser client\'s shared modules (/vendor/shared/:name)',
  asset: 'the dashboard\'s files (/:name)'
}

/**
 * What is wrong with the event stream's `path` as a route beside Tower's, or null: a pattern
 * Fastify's router refuses, or a collision with a Tower route by the router's own rules ('/:x' is
 * '/:name'). Checked before start-up: Fastify throws on either while loading the plugins, where
 * no caller can catch it. Every Tower path counts as taken, whatever its method: one path, one job.
 */
export function routeProblem (path: string): string | null {
  try {
    FindMyWay().on('GET', path, () => {})
  } catch (err) {
    return `is not a route Fastify accepts (${(err as Error).message})`
  }
  for (const [key, route] of Object.entries(TOWER_ROUTES) as Array<[keyof typeof TOWER_ROUTES, string]>) {
    const router = FindMyWay()
    router.on('GET', route, () => {})
    try {
      router.on('GET', path, () => {})
    } catch {
      return `is ${ROUTE_NAMES[key]}; the event stream needs a path of its own`
    }
  }
  return null
}
