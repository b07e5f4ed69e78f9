/** Tower's own routes beside the event stream, named once for the route modules and the config check. */
export const TOWER_ROUTES = Object.freeze({
  dashboard: '/',
  notify: '/api/notify',
  stats: '/api/events/stats',
  metrics: '/metrics'
})

/** GET paths the event stream may not take (`path` option): Fastify would refuse the duplicate. */
export const RESERVED_STREAM_PATHS: ReadonlyMap<string, string> = new Map([
  [TOWER_ROUTES.dashboard, 'the dashboard page'],
  [TOWER_ROUTES.stats, 'the stats route'],
  [TOWER_ROUTES.metrics, 'the metrics route']
])
