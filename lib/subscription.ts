import type { FastifyRequest } from 'fastify'
import { SubscriptionError } from './errors'
import { parseEventId, type ParsedEventId } from './event-id'

/** What a connecting client asked for: where to resume, and which topics it wants. */
export interface Subscription {
  lastEventId: ParsedEventId | null
  /** null: every event; otherwise events without a topic plus these topics. */
  topics: ReadonlySet<string> | null
}

export type TopicsFromRequest = (request: FastifyRequest) => readonly string[] | null | undefined

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

function topicsFromQuery (request: FastifyRequest): readonly string[] | null {
  const raw = (request.query as Record<string, unknown> | undefined)?.topics
  if (raw === undefined) return null
  if (typeof raw !== 'string') throw new SubscriptionError('query parameter "topics" must appear once, as a comma-separated list')
  return raw.split(',')
}

/**
 * Reads the subscription from the request: `Last-Event-ID` (header, or `lastEventId` query
 * parameter for clients that cannot set headers; malformed or over-long ids are ignored) and the
 * topics (`?topics=a,b` by default, or the app's own `topicsFromRequest`).
 */
export function readSubscription (request: FastifyRequest, topicsFromRequest: TopicsFromRequest | undefined): Subscription {
  const query = request.query as Record<string, unknown> | undefined
  const header = request.headers['last-event-id']
  const fromQuery = query?.lastEventId
  const lastEventId = parseEventId(typeof header === 'string' ? header : typeof fromQuery === 'string' ? fromQuery : undefined)

  const asked = topicsFromRequest === undefined ? topicsFromQuery(request) : topicsFromRequest(request)
  if (asked === null || asked === undefined) return { lastEventId, topics: null }
  if (!Array.isArray(asked) || asked.length === 0 || asked.length > MAX_TOPICS) {
    throw new SubscriptionError(`topics must be a list of 1 to ${MAX_TOPICS} topics`)
  }
  return { lastEventId, topics: new Set(asked.map((topic) => checkTopic(topic, 'each topic'))) }
}
