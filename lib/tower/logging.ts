import type { FastifyServerOptions } from 'fastify'
import pinoPretty from 'pino-pretty'

export const LOG_FORMATS = ['pretty', 'json'] as const
/** `pretty`: a line a person reads (pino-pretty, as Fastify's CLI with -P); `json`: pino's JSON lines. */
export type LogFormat = typeof LOG_FORMATS[number]

/**
 * The format when none was forced: pretty for a person at a terminal, JSON lines for whatever
 * reads a pipe or a file, and always JSON in production.
 */
export function chooseLogFormat (forced: LogFormat | undefined, stdoutIsTTY: boolean, nodeEnv: string | undefined): LogFormat {
  if (forced !== undefined) return forced
  return stdoutIsTTY && nodeEnv !== 'production' ? 'pretty' : 'json'
}

/**
 * Fastify's logger option for a format: JSON as Fastify writes it, or the same records made
 * readable (in colour where pino-pretty sees a terminal, NO_COLOR and FORCE_COLOR honoured).
 */
export function towerLogger (format: LogFormat): FastifyServerOptions['logger'] {
  if (format === 'json') return true
  return {
    stream: pinoPretty({
      translateTime: 'SYS:HH:MM:ss.l',
      // The summary's fields (tower_sse) repeat its message for machines; pid and host say nothing here.
      ignore: 'pid,hostname,tower_sse',
      // Written before the next line of Tower's own and before the process exits (the final summary).
      sync: true
    })
  }
}
