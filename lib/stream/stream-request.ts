import type { FastifyRequest } from 'fastify'
import { SubscriptionError, TopicForbiddenError } from '../errors'
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

const TOPIC = /^[A-Za-z0-9_.:-]{1,64}$/
const MAX_TOPICS = 32

export function isValidTopic (topic: unknown): topic is string {
  return typeof topic === 'string' && TOPIC.test(topic)
}

function checkTopic (topic: unknown, where: string): string {
  if (!isValidTopic(topic)) {
    throw new SubscriptionError(`${where} must be 1-64 characters of A-Z a-z 0-9 _ . : -, got ${JSON.stringify(topic)}`)
  }
  return topic
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
  if (!Array.isArray(granted) || granted.length === 0 || granted.length > MAX_TOPICS) {
    throw new SubscriptionError(`topics must be a list of 1 to ${MAX_TOPICS} topics, null or ALL_TOPICS`)
  }
  return new Set(granted.map((topic) => checkTopic(topic, 'each topic')))
}

const NO_TOPICS: ReadonlySet<string> = new Set()
