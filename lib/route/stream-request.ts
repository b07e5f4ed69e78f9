import type { FastifyRequest } from 'fastify'
import { SubscriptionError, TopicError, TopicForbiddenError } from '../errors'
import { describe } from '../shared/describe'
import { parseEventId, type ParsedEventId } from '../bus/event-id'
import { ALL_TOPICS, checkTopic, MAX_TOPICS, type TopicGrant } from '../events/topic'

/** The topics granted to a request (null or undefined: none, untopiced events only; ALL_TOPICS: all); it may be async. */
export type TopicsFromRequest = (request: FastifyRequest) => TopicsGranted | PromiseLike<TopicsGranted>
export type TopicsGranted = readonly string[] | typeof ALL_TOPICS | null | undefined

/** Which of the topics a client asks for in `?topics=` it may have; any other is refused (403). */
export type AllowTopic = (topic: string, request: FastifyRequest) => boolean

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
 * Where a stream resumes: nowhere (null: no id, a fresh stream), after a position of the bus, or
 * after an id the bus never issued (`foreign`: a per-request stream's own id, a forged or mangled
 * one) — which gets a resync, since nothing proves what the client missed since.
 */
export type ResumePoint = ParsedEventId | 'foreign' | null

/** The resume point of an id as sent (undefined or empty: none). */
export function resumePointOf (id: string | null | undefined): ResumePoint {
  if (id === undefined || id === null || id === '') return null
  return parseEventId(id) ?? 'foreign'
}

/**
 * Where the client resumes: `Last-Event-ID` (header, or `lastEventId` query parameter for
 * clients that cannot set headers).
 */
export function lastEventIdOf (request: FastifyRequest): ResumePoint {
  return resumePointOf(lastEventIdText(request))
}

/** The id the client sent (header, else `?lastEventId=`), as sent; undefined when none. */
export function lastEventIdText (request: FastifyRequest): string | undefined {
  const header = request.headers['last-event-id']
  const fromQuery = (request.query as Record<string, unknown> | undefined)?.lastEventId
  return typeof header === 'string' ? header : typeof fromQuery === 'string' ? fromQuery : undefined
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
