import type { FastifyInstance } from 'fastify'

/** The events route of every server under test, as in Tower. */
export const EVENTS_PATH = '/api/events'

/** What a server under test has done to streams since it started. */
export interface StreamCounts {
  admitted: number
  rejected: number
  /** Live clients ended to make room for a new one (the legacy behaviour). */
  evicted: number
  /** Streams the server ended at their max age. */
  expired: number
  /** Streams open now. */
  open: number
}

/**
 * Adds one server's events route (and whatever it needs) to `app`; returns how to read its
 * counts. `options` are the variant's JSON options from the server table.
 */
export type ServerSetup = (app: FastifyInstance, options: Record<string, unknown>) => Promise<() => StreamCounts>

/** The first event each of Tower's servers sends (tower-sse gets it through `initialEvent`). */
export function connectedEvent (id: string): string {
  return JSON.stringify({ type: 'connected', id })
}
