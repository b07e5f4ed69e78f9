import type { FastifyRequest } from 'fastify'
import { SubscriptionError, TopicError, TopicForbiddenError } from '../errors'
import { describe } from '../client/describe'
import { parseEventId, type ParsedEventId } from '../events/event-id'

/**
 * The grant of every topic (a firehose: a dashboard, an audit log). A symbol, not a string such as
 * `'*'`: no query, header or JSON body can carry it, so only the app's own code can grant it.
 * `Symbol.for`, so two copies of the package (ESM and CJS) agree on it.
 */
export const ALL_TOPICS: unique symbol = Symbol.for('tower-sse.all-topics')

/** What a stream may receive beyond the untopiced events: these topics, or every one. */
export type TopicGrant = ReadonlySet<string> | typeof ALL_TOPICS

/** The topics granted to a request (null or undefined: none, untopiced events only; ALL_TOPICS: all); it may be async. */
export type TopicsFromRequest = (request: FastifyRequest) => TopicsGranted | PromiseLike<TopicsGranted>
export type TopicsGranted = readonly string[] | typeof ALL_TOPICS | null | undefined

/** Which of the topics a client asks for in `?topics=` it may have; any other is refused (403). */
export type AllowTopic = (topic: string, request: FastifyRequest) => boolean

/** A topic name's length limit, in characters (code points): room for an email, a UUID, a path. */
export const MAX_TOPIC_LENGTH = 256
/** Topics one stream may be granted (ALL_TOPICS aside). */
export const MAX_TOPICS = 128
/** How much of a refused topic an error shows. */
const SHOWN = 64

// Any printable id: no control character (C0, DEL, C1), no line or paragraph separator, no lone
// surrogate (it could not be encoded); counted in code points, so an emoji is one.
const TOPIC = new RegExp(`^[^\\p{Cc}\\p{Cs}\\p{Zl}\\p{Zp}]{1,${MAX_TOPIC_LENGTH}}$`, 'u')

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

/**
 * The opt-in to client-chosen topics: `topicsFromRequest: topicsFromQuery({ allow })` reads
 * `?topics=a,b` and grants each topic `allow(topic, request)` accepts; one it refuses is a 403
 * naming it, and no `?topics=` grants none. Without it a client cannot pick its own topics.
 */
export function topicsFromQuery ({ allow }: { allow: AllowTopic }): (request: FastifyRequest) => readonly string[] | null {
  if (typeof allow !== 'function') throw new TypeError('tower-sse: topicsFromQuery({ allow }) needs allow: (topic, request) => boolean')
  return (request) => {
    const raw = (request.query as Record<string, unknown> | undefined)?.topics
    if (raw === undefined) return null
    if (typeof raw !== 'string') throw new SubscriptionError('query parameter "topics" must appear once, as a comma-separated list')
    const asked = raw.split(',')
    // Names first: allow() is the app's code and sees only well-formed topics.
    topicSet(asked)
    for (const topic of asked) if (allow(topic, request) !== true) throw new TopicForbiddenError(JSON.stringify(topic))
    return asked
  }
}

/**
 * Where the client resumes: `Last-Event-ID` (header, or `lastEventId` query parameter for
 * clients that cannot set headers); a malformed or over-long id is ignored (null).
 */
export function lastEventIdOf (request: FastifyRequest): ParsedEventId | null {
  const header = request.headers['last-event-id']
  const fromQuery = (request.query as Record<string, unknown> | undefined)?.lastEventId
  return parseEventId(typeof header === 'string' ? header : typeof fromQuery === 'string' ? fromQuery : undefined)
}

/** Checks the topics granted (by topicsFromRequest or subscribe()); null or undefined: none, ALL_TOPICS: every one. */
export function topicSet (granted: unknown): TopicGrant {
  if (granted === ALL_TOPICS) return ALL_TOPICS
  if (granted === null || granted === undefined) return NO_TOPICS
  if (!Array.isArray(granted)) throw new SubscriptionError(`topics must be a list of topic names, null or ALL_TOPICS, got ${describe(granted)}`)
  if (granted.length > MAX_TOPICS) throw new TopicError(`a stream may be granted at most ${MAX_TOPICS} topics, got ${granted.length}`)
  return granted.length === 0 ? NO_TOPICS : new Set(granted.map(checkTopic))
}

const NO_TOPICS: ReadonlySet<string> = new Set()
