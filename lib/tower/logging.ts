import type { FastifyServerOptions } from 'fastify'
import type PinoPretty from 'pino-pretty'
import { requireOptional } from './optional'
import { TowerConfigError } from './errors'

export const LOG_FORMATS = ['pretty', 'json'] as const
/** `pretty`: a line a person reads (pino-pretty, as Fastify's CLI with -P); `json`: pino's JSON lines. */
export type LogFormat = typeof LOG_FORMATS[number]

/**
 * The format when none was forced: pretty for a person at a terminal, JSON lines for whatever
 * reads a pipe or a file, and always JSON in production.
 */
export function chooseLogFormat (forced: LogFormat | undefined, stdoutIsTTY: boolean, nodeEnv: string | undefined, prettyInstalled = true): LogFormat {
  if (forced !== undefined) return forced
  return stdoutIsTTY && nodeEnv !== 'production' && prettyInstalled ? 'pretty' : 'json'
}

/**
 * pino-pretty, or null where it is not installed: a devDependency, so `npm install tower-sse`
 * installs nothing for Tower's readable lines; the bin then logs JSON unless told otherwise.
 */
export function loadPinoPretty (): typeof PinoPretty | null {
  return requireOptional<typeof PinoPretty>('pino-pretty')
}

/** `--log-format pretty` where pino-pretty is not installed. */
const PRETTY_MISSING = 'log format pretty needs pino-pretty, which `npm install tower-sse` does not install: ' +
  'npm install pino-pretty, or use --log-format json'

/**
 * Fastify's logger option for a format: JSON as Fastify writes it, or the same records made
 * readable (in colour where pino-pretty sees a terminal, NO_COLOR and FORCE_COLOR honoured).
 */
export function towerLogger (format: LogFormat, pinoPretty: typeof PinoPretty | null): FastifyServerOptions['logger'] {
  if (format === 'json') return true
  if (pinoPretty === null) throw new TowerConfigError(PRETTY_MISSING)
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
