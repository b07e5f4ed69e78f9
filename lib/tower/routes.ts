import FindMyWay from 'find-my-way'

/** Tower's own routes beside the event stream, named once for the route modules and the config check. */
export const TOWER_ROUTES = Object.freeze({
  dashboard: '/',
  notify: '/api/notify',
  stats: '/api/events/stats',
  vendor: '/vendor/:name',
  asset: '/:name'
})

const ROUTE_NAMES: Readonly<Record<keyof typeof TOWER_ROUTES, string>> = {
  dashboard: 'the dashboard page',
  notify: 'the notify route',
  stats: 'the stats route',
  vendor: 'the dashboard\'s vendor modules (/vendor/:name)',
  asset: 'the dashboard\'s files (/:name)'
}

/**
 * Which Tower route the event stream's `path` would collide with, by Fastify's own router rules
 * ('/:x' is '/:name'), or null. Checked before start-up: Fastify throws on a duplicate while
 * loading the plugins, where no caller can catch it. Every Tower path counts as taken, whatever
 * its method: one path, one job.
 */
export function routeClash (path: string): string | null {
  for (const [key, route] of Object.entries(TOWER_ROUTES) as Array<[keyof typeof TOWER_ROUTES, string]>) {
    const router = FindMyWay()
    router.on('GET', route, () => {})
    try {
      router.on('GET', path, () => {})
    } catch {
      return ROUTE_NAMES[key]
    }
  }
  return null
}
