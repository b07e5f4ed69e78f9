import createError from '@fastify/error'
import { describe } from './describe'

const OptionErrorBase = createError('TOWER_SSE_OPTION', 'tower-sse: option "%s" must be %s, got %s', 500, TypeError)

/** Thrown at register time; its message names the option (`storm.tarpitMs` for a group's) and the value refused. */
export class TowerSseOptionError extends OptionErrorBase {
  readonly option: string
  constructor (option: string, value: unknown, expected: string) {
    super(option, expected, describe(value))
    this.name = 'TowerSseOptionError'
    this.option = option
  }
}

/** The longest a Node timer waits. */
export const MAX_TIMER_MS = 2 ** 31 - 1

export interface IntegerRule { min: number, max?: number }

/** `value`, or `fallback` when it is undefined, checked against `rule`; the error names `name`. */
export function integer (name: string, value: unknown, fallback: number, rule: IntegerRule): number {
  if (value === undefined) return fallback
  const ok = typeof value === 'number' && Number.isSafeInteger(value) && value >= rule.min &&
    (rule.max === undefined || value <= rule.max)
  if (!ok) {
    const range = rule.max === undefined ? `>= ${rule.min}` : `between ${rule.min} and ${rule.max}`
    throw new TowerSseOptionError(name, value, `an integer ${range}`)
  }
  return value as number
}

/** An optional function; the error says what it should be. */
export function optionalFunction<T> (name: string, value: unknown, expected: string): T | undefined {
  if (value !== undefined && typeof value !== 'function') throw new TowerSseOptionError(name, value, expected)
  return value as T | undefined
}

/**
 * A group of options (`storm: { … }`) as a plain record whose keys are all `known`, or undefined
 * when the group is left out. An unknown key is named with its group and the nearest known one.
 */
export function group (name: string, value: unknown, known: readonly string[]): Record<string, unknown> | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TowerSseOptionError(name, value, `an object { ${known.join(', ')} }`)
  }
  const given = value as Record<string, unknown>
  for (const key of Object.keys(given)) {
    if (!known.includes(key)) throw new TowerSseOptionError(`${name}.${key}`, given[key], `one of ${name}'s options${suggestion(key, known)}`)
  }
  return given
}

/**
 * ` (did you mean "x"?)` for the known name nearest to `name` — by edit distance, ignoring case —
 * or '' when none is near enough to be a typo; for a name of `renamed`, where it went.
 */
export function suggestion (name: string, known: readonly string[], renamed: Readonly<Record<string, string>> = {}): string {
  if (Object.hasOwn(renamed, name)) return ` (${renamed[name]})`
  let best: string | null = null
  let bestDistance = Infinity
  for (const candidate of known) {
    const distance = editDistance(name.toLowerCase(), candidate.toLowerCase())
    if (distance < bestDistance) {
      best = candidate
      bestDistance = distance
    }
  }
  return best !== null && bestDistance <= Math.max(2, Math.floor(name.length / 4)) ? ` (did you mean "${best}"?)` : ''
}

/** Levenshtein distance, one row at a time. */
function editDistance (a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    previous = row
  }
  return previous[b.length]
}
