import { TopicError } from '../errors'
import { describe } from '../shared/describe'

/**
 * The grant of every topic (a firehose: a dashboard, an audit log). A symbol, not a string such as
 * `'*'`: no query, header or JSON body can carry it, so only the app's own code can grant it.
 * `Symbol.for`, so two copies of the package (ESM and CJS) agree on it.
 */
export const ALL_TOPICS: unique symbol = Symbol.for('tower-sse.all-topics')

/** What a stream may receive beyond the untopiced events: these topics, or every one. */
export type TopicGrant = ReadonlySet<string> | typeof ALL_TOPICS

/** A topic name's length limit, in characters (code points): room for an email, a UUID, a path. */
export const MAX_TOPIC_LENGTH = 256
/** Topics one stream may be granted (ALL_TOPICS aside). */
export const MAX_TOPICS = 128
/** How much of a refused topic an error shows. */
const SHOWN = 64

// Any printable id: no control character (C0, DEL, C1), no line or paragraph separator, no lone
// surrogate (it could not be encoded); counted in code points, so an emoji is one.
const TOPIC = new RegExp(`^[^\\p{Cc}\\p{Cs}\\p{Zl}\\p{Zp}]{1,${MAX_TOPIC_LENGTH}}$`, 'u')

/** A topic an event may carry and a stream may be granted. */
export function isValidTopic (topic: unknown): topic is string {
  return typeof topic === 'string' && TOPIC.test(topic)
}

/** What is wrong with a topic name (null: nothing), naming it, truncated and escaped, and the rule. */
export function topicProblem (topic: unknown): string | null {
  if (isValidTopic(topic)) return null
  const rule = `must be 1-${MAX_TOPIC_LENGTH} characters with no control character or line break`
  if (typeof topic !== 'string') return `a topic ${rule}, got ${describe(topic)}`
  const chars = [...topic]
  // JSON escapes C0 and lone surrogates; DEL, C1 and the separators are escaped here too.
  const shown = JSON.stringify(chars.slice(0, SHOWN).join('')).replace(/[\p{Cc}\p{Zl}\p{Zp}]/gu, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
  return `topic ${shown}${chars.length > SHOWN ? `… (${chars.length} characters)` : ''} ${rule}`
}

/** The topic, checked by the one rule for grants and broadcasts (TOWER_SSE_BAD_TOPIC otherwise). */
export function checkTopic (topic: unknown): string {
  const problem = topicProblem(topic)
  if (problem !== null) throw new TopicError(problem)
  return topic as string
}
