import createError from '@fastify/error'

/**
 * Tower's own errors (the app, not the plugin), each with a stable `TOWER_*` `code` to match on;
 * built with @fastify/error like the plugin's.
 */

const ConfigErrorBase = createError('TOWER_CONFIG', '%s', 500)

/** A bad flag, environment variable or value; the message names it and fits on one line. */
export class TowerConfigError extends ConfigErrorBase {
  constructor (message: string) {
    super(message)
    this.name = 'TowerConfigError'
  }
}

/** A notification POST /api/notify refuses (400); the message names each bad field. */
export const NotifyValidationError = createError('TOWER_NOTIFY_INVALID', '%s', 400)

/** A stats window of other than a whole number (>= 1) of seconds. */
export const StatsWindowError = createError('TOWER_STATS_WINDOW', 'StatsWindow: seconds must be an integer >= 1, got %s', 500, RangeError)

/** A Host outside the allowlist (a guard against DNS rebinding). */
export const TowerHostNotAllowedError = createError<[string]>(
  'TOWER_HOST_NOT_ALLOWED',
  'Host %s is not one this Tower answers (a guard against DNS rebinding): add it with --allowed-hosts or TOWER_ALLOWED_HOSTS',
  403
)

/** A state-changing request from a page of another site. */
export const TowerCrossSiteError = createError<[string]>(
  'TOWER_CROSS_SITE',
  'a page from another site (%s) may not change anything here: its Origin must be an allowed host (--allowed-hosts or TOWER_ALLOWED_HOSTS)',
  403
)

/** Started with --token, and the request did not carry it. */
export const TowerTokenRequiredError = createError(
  'TOWER_TOKEN_REQUIRED',
  'this Tower was started with --token (TOWER_TOKEN): send Authorization: Bearer <token>',
  401
)

/** GET /metrics where prom-client (an optional peer) is not installed. */
export const TowerMetricsUnavailableError = createError(
  'TOWER_METRICS_UNAVAILABLE',
  'metrics need prom-client, which is not installed beside tower-sse: npm install prom-client',
  501
)
