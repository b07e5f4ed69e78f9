/**
 * The stream route's `config` for @fastify/under-pressure, through its documented per-route
 * `pressureHandler`: registered plainly, under-pressure's own onRequest hook would answer a
 * stream request itself (FST_UNDER_PRESSURE, a fixed Retry-After, an error log line each). Let
 * through, the request meets admission, which refuses it as every other refusal: the jittered
 * TOWER_SSE_PRESSURE, counted, in the summary line. Other routes keep under-pressure's answer.
 */
export const UNDER_PRESSURE_ROUTE_CONFIG = Object.freeze({ pressureHandler: (): undefined => undefined })
