import createError from '@fastify/error'

/**
 * Errors with stable codes: match `err.code`, never the message. (Issue 16 gathers every code
 * here; these are the bus's.)
 */

/** broadcast() could not hand the event to the bus: it was NOT published (nothing is queued for later). */
export const BusUnavailableError = createError<'TOWER_SSE_BUS_UNAVAILABLE', 503, [string]>(
  'TOWER_SSE_BUS_UNAVAILABLE', 'tower-sse: the event bus is unavailable, the event was not published: %s', 503)

/** broadcast() after the plugin closed. */
export const BusClosedError = createError<'TOWER_SSE_BUS_CLOSED', 503, []>(
  'TOWER_SSE_BUS_CLOSED', 'tower-sse: the event bus is closed, the event was not published', 503)
