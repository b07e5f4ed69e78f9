import type { FastifyRequest } from 'fastify'
import { SubscriptionError } from '../errors'
import { parseEventId, type ParsedEventId } from '../bus/event-id'
import { isValidTopic } from '../events/topic'

/** The topics a request subscribes to (null or undefined: every event); it may be async. */
export type TopicsFromRequest = (request: FastifyRequest) => readonly string[] | null | undefined | PromiseLike<readonly string[] | null | undefined>

const MAX_TOPICS = 32

function checkTopic (topic: unknown, where: string): string {
  if (!isValidTopic(topic)) {
    throw new SubscriptionError(`${where} must be 1-64 characters of A-Z a-z 0-9 _ . : -, got ${JSON.stringify(topic)}`)
  }
  return topic
}

/** The topics a request asks for by default: `?topics=a,b` (null: every event). */
export function topicsFromQuery (request: FastifyRequest): readonly string[] | null {
  const raw = (request.query as Record<string, unknown> | undefined)?.topics
  if (raw === undefined) return null
  if (typeof raw !== 'string') throw new SubscriptionError('query parameter "topics" must appear once, as a comma-separated list')
  return raw.split(',')
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

/** Checks the topics asked for (by the query, topicsFromRequest or subscribe()); null or undefined: every event. */
export function topicSet (asked: unknown): ReadonlySet<string> | null {
  if (asked === null || asked === undefined) return null
  if (!Array.isArray(asked) || asked.length === 0 || asked.length > MAX_TOPICS) {
    throw new SubscriptionError(`topics must be a list of 1 to ${MAX_TOPICS} topics`)
  }
  return new Set(asked.map((topic) => checkTopic(topic, 'each topic')))
}
