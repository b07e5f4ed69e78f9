import { normalizeOptions } from '../../lib/options'
import { LEGACY_MAX_CLIENTS } from './servers/legacy'
import { UPSTREAM_MAX_CLIENTS } from './servers/upstream-fix'

/** Which implementation a server process runs (see server-main). */
export type ServerSetupName = 'legacy' | 'upstream-fix' | 'tower-sse' | 'bare-503'

export interface ServerVariant {
  /** The name in tables, charts and `--servers`. */
  name: string
  setup: ServerSetupName
  /** JSON options handed to the server process (tower-sse: the plugin's options). */
  options: Record<string, unknown>
  summary: string
  /** Only for the refusal-path comparison, not the storm matrix. */
  rejectionOnly?: boolean
}

/**
 * Every server the storm runs, in table order. A tower-sse preset is a row with plugin options;
 * a row whose options the plugin does not (yet) accept is skipped with the plugin's reason.
 */
export const SERVER_VARIANTS: readonly ServerVariant[] = [
  { name: 'legacy', setup: 'legacy', options: {}, summary: 'Tower before the fix: cap 50, evicts the oldest, logs every connect and disconnect' },
  { name: 'upstream-fix', setup: 'upstream-fix', options: {}, summary: 'the shipped fix: cap 200, 503 + Retry-After: 5 (keep-alive), retry: 5000, 5 min ± 60 s max age' },
  { name: 'tower-sse', setup: 'tower-sse', options: {}, summary: 'the plugin with its defaults' },
  { name: 'tower-sse-retry', setup: 'tower-sse', options: { rejectWith: 'retry' }, summary: 'the plugin refusing with a 200 stream that carries a long retry:' },
  // During a storm tower-sse holds refusals (the tarpit), which caps a flood's rate by design;
  // without it the refusal path shows what a refusal itself costs.
  { name: 'tower-sse-no-tarpit', setup: 'tower-sse', options: { storm: { tarpitMs: 0 } }, summary: 'the plugin answering every refusal at once (tarpit off)', rejectionOnly: true }
]

/** The rejection path's yardstick, not a server under test. */
export const BARE_503: ServerVariant = {
  name: 'bare-503', setup: 'bare-503', options: {}, summary: 'a bare Fastify route answering 503 like tower-sse refuses'
}

/** How many streams the variant holds at once. */
export function capacityOf (variant: ServerVariant): number {
  switch (variant.setup) {
    case 'legacy': return LEGACY_MAX_CLIENTS
    case 'upstream-fix': return UPSTREAM_MAX_CLIENTS
    case 'tower-sse': return normalizeOptions(variant.options).maxClients
    case 'bare-503': return 0
  }
}

/** Why the variant cannot run with this build of the plugin, or null when it can. */
export function unavailableReason (variant: ServerVariant): string | null {
  if (variant.setup !== 'tower-sse') return null
  try {
    normalizeOptions(variant.options)
    return null
  } catch (error) {
    return (error as Error).message
  }
}

/** A tower-sse preset from the command line: `name={"maxClients":400}`. */
export function parsePreset (text: string): ServerVariant {
  const match = /^([a-z0-9][a-z0-9-]*)=(.*)$/s.exec(text)
  if (match === null) throw new Error(`--preset must look like name={"option":value}, got ${JSON.stringify(text)}`)
  let options: unknown
  try {
    options = JSON.parse(match[2])
  } catch (error) {
    throw new Error(`--preset ${match[1]}: options are not JSON (${(error as Error).message})`)
  }
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new Error(`--preset ${match[1]}: options must be a JSON object, got ${match[2]}`)
  }
  return { name: match[1], setup: 'tower-sse', options: options as Record<string, unknown>, summary: `tower-sse with ${match[2]}` }
}
