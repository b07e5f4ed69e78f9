import createError from '@fastify/error'
import { REFUSALS, type RefusalReason } from './observe/vocabulary'
import { TowerSseOptionError } from './shared/option-rules'

export { TowerSseOptionError }

/**
 * Every error the plugin throws or sends, each with a stable `TOWER_SSE_*` `code` to match on
 * (messages may change); Tower's own are in lib/tower/errors.ts. Built with @fastify/error, so
 * they are what Fastify users already know (`code`, `statusCode`, `instanceof`).
 */

/** A bad `topics` query (or topicsFromRequest result): the stream route answers 400 with it. */
export const SubscriptionError = createError('TOWER_SSE_BAD_SUBSCRIPTION', 'tower-sse: %s', 400)

/** `topicsFromQuery({ allow })` refused a topic the client asked for in `?topics=`: the stream route answers 403. */
export const TopicForbiddenError = createError<[string]>('TOWER_SSE_TOPIC_FORBIDDEN', 'tower-sse: topic %s is not one this client may subscribe to', 403)

/**
 * A topic name outside the one rule (1-256 characters, no control character or line break), or
 * too many topics for one stream: in a grant the stream route answers 400; broadcast() rejects.
 */
export const TopicError = createError<[string]>('TOWER_SSE_BAD_TOPIC', 'tower-sse: %s', 400, TypeError)

/** An event's `id` or `event` is not a string, or holds CR, LF or NUL (it would inject a field). */
export const EventFieldError = createError('TOWER_SSE_BAD_FIELD', 'tower-sse: event %s must %s', 500, TypeError)

/** Event data JSON cannot represent (undefined, a function, a symbol, a BigInt, a cycle). */
export const UnencodableDataError = createError<[string]>('TOWER_SSE_UNENCODABLE_DATA',
  'tower-sse: event data cannot be sent as JSON: %s', 500, TypeError)

/** `fastify.sse.send` or `close` given something other than `{ id }` or `{ key }` (strings). */
export const StreamAddressError = createError<[string]>('TOWER_SSE_BAD_ADDRESS', 'tower-sse: a stream address must be { id: string } or { key: string }, got %s', 500, TypeError)

/** `fastify.sse.close` with a reason it does not count. */
export const AppCloseReasonError = createError<[string, string]>('TOWER_SSE_BAD_CLOSE_REASON', 'tower-sse: a stream is closed as %s, got %s', 500, TypeError)

/** subscribe()'s `stream` is neither an async iterable nor a function that returns one. */
export const StreamSourceError = createError<[string]>('TOWER_SSE_BAD_STREAM',
  'tower-sse: subscribe()\'s stream must be an async iterable (an async generator, a Readable) or a function ({ id, signal }) => one, got %s', 500, TypeError)

/** A `retry:` value that is not a non-negative integer of ms. */
export const RetryValueError = createError('TOWER_SSE_BAD_RETRY', 'tower-sse: retry must be a non-negative integer of ms, got %s', 500, TypeError)

/** An invariant: admission must refuse before the registry is asked to hold one stream too many. */
export const RegistryFullError = createError('TOWER_SSE_REGISTRY_FULL', 'tower-sse: registry is full; admission must refuse before add()', 500)

/** broadcast() could not hand the event to the bus: it was NOT published (nothing is queued for later). */
export const BusUnavailableError = createError<[string]>(
  'TOWER_SSE_BUS_UNAVAILABLE', 'tower-sse: the event bus is unavailable, the event was not published: %s', 503)

/** broadcast() after the plugin closed. */
export const BusClosedError = createError(
  'TOWER_SSE_BUS_CLOSED', 'tower-sse: the event bus is closed, the event was not published', 503)

/** broadcast() while maxPendingPublishes publishes await Redis: refused at once, NOT published. */
export const BusBusyError = createError<[number]>(
  'TOWER_SSE_BUS_BUSY', 'tower-sse: %d publishes are already waiting for the event bus; the event was not published', 503)

/**
 * broadcast()'s deadline passed after the event was sent to Redis and before its answer: it may
 * have been published or not. Retry with the same idempotencyKey: it lands at most once.
 */
export const PublishOutcomeUnknownError = createError<[number]>(
  'TOWER_SSE_PUBLISH_UNKNOWN', 'tower-sse: no answer from the event bus within %d ms: the event may or may not be published (retry with the same idempotencyKey)', 503)

/** Redis may evict the bus's keys (maxmemory-policy allkeys-*): events could vanish unseen. */
export const BusEvictableError = createError<[string]>(
  'TOWER_SSE_BUS_EVICTABLE', 'tower-sse: Redis maxmemory-policy is %s, which may evict the bus\'s keys and lose events silently; set maxmemory-policy to noeviction (or a volatile-* policy)', 500)

/** The Redis bus could not start (register fails): where, and what happened, in one line. */
export const BusStartError = createError<[string, string]>(
  'TOWER_SSE_BUS_START', 'tower-sse: cannot start the Redis bus on %s: %s', 500)

/** broadcast()'s idempotencyKey is not 1-128 characters of A-Z a-z 0-9 _ . : + / = - */
export const BroadcastIdempotencyKeyError = createError<[string]>('TOWER_SSE_BAD_IDEMPOTENCY_KEY',
  'tower-sse: broadcast idempotencyKey must be 1-128 characters of A-Z a-z 0-9 _ . : + / = -, got %s', 500, TypeError)

/** broadcast()'s idempotencyKey was used, in its scope and window, for another body: nothing is published. */
export const IdempotencyConflictError = createError<[string]>('TOWER_SSE_IDEMPOTENCY_CONFLICT',
  'tower-sse: idempotencyKey %s was already used for a different event (data, event, topic or idProperty); nothing was published', 409)

/** broadcast()'s idProperty is not an identifier, or the data cannot carry it. */
export const BroadcastIdPropertyError = createError<[string]>('TOWER_SSE_BAD_ID_PROPERTY', 'tower-sse: broadcast idProperty %s', 500, TypeError)

/** A second tower-sse in one context: its `fastify.sse` and `reply.eventStream` would collide. */
export const AlreadyRegisteredError = createError('TOWER_SSE_ALREADY_REGISTERED',
  'tower-sse: already registered in this context; one registration serves any number of stream routes (route option eventStream: true), ' +
  'and a separate registry needs its own context: app.register(async (scope) => { await scope.register(towerSse, …) })', 500)

/** A route with `eventStream` declared in a context where no tower-sse is registered, there or above. */
export const StreamRouteOutsideError = createError<[string]>('TOWER_SSE_ROUTE_OUTSIDE',
  'tower-sse: %s has the route option eventStream, but no tower-sse is registered in its context or above. Register tower-sse in a ' +
  'parent of this route\'s plugin, or make the plugin that registers it share its context (wrap it in fastify-plugin\'s fp())', 500)

/** A stream route's handler called subscribe() without returning (or awaiting) its promise, and Fastify answered meanwhile. */
export const SubscribeNotReturnedError = createError<[string]>('TOWER_SSE_NOT_RETURNED',
  'tower-sse: the handler of %s did not return reply.eventStream.subscribe(), so the request was answered before its stream could open; ' +
  'write `return reply.eventStream.subscribe(…)` (or await it)', 500)

/** A resume with the Last-Event-ID of a resumable stream this client may not see: another owner's, or one that never was (told apart by nothing). */
export const StreamNotFoundError = createError('TOWER_SSE_STREAM_NOT_FOUND', 'tower-sse: no such stream', 404)

/** sseOf(fastify) where no tower-sse is registered in that context or above. */
export const NotRegisteredError = createError('TOWER_SSE_NOT_REGISTERED',
  'tower-sse: not registered in this context or above; fastify.sse exists where tower-sse is registered and in the contexts below', 500)

/** The stream guard's `allowedHosts` refused the request's Host (DNS rebinding sends its own name). */
export const HostNotAllowedError = createError<[string]>('TOWER_SSE_HOST_NOT_ALLOWED',
  'tower-sse: Host %s is not one of the allowedHosts', 403)

/** The stream guard's `allowedOrigins` refused the request's Origin (a page of another origin). */
export const OriginNotAllowedError = createError<[string]>('TOWER_SSE_ORIGIN_NOT_ALLOWED',
  'tower-sse: Origin %s is not one of the allowedOrigins', 403)

/** The `code` in the JSON body of a refusal (503, or 429 for perKey), by reason. */
export const REFUSAL_CODES = Object.freeze(Object.fromEntries(
  Object.entries(REFUSALS).map(([reason, { code }]) => [reason, code])
) as { [R in RefusalReason]: typeof REFUSALS[R]['code'] })

/** Every error constructor, by code, as Fastify exposes its own (`fastify.errorCodes`). */
export const errorCodes = Object.freeze({
  TOWER_SSE_OPTION: TowerSseOptionError,
  TOWER_SSE_BAD_SUBSCRIPTION: SubscriptionError,
  TOWER_SSE_BAD_TOPIC: TopicError,
  TOWER_SSE_TOPIC_FORBIDDEN: TopicForbiddenError,
  TOWER_SSE_BAD_FIELD: EventFieldError,
  TOWER_SSE_UNENCODABLE_DATA: UnencodableDataError,
  TOWER_SSE_BAD_RETRY: RetryValueError,
  TOWER_SSE_BAD_STREAM: StreamSourceError,
  TOWER_SSE_BAD_ADDRESS: StreamAddressError,
  TOWER_SSE_BAD_CLOSE_REASON: AppCloseReasonError,
  TOWER_SSE_REGISTRY_FULL: RegistryFullError,
  TOWER_SSE_BUS_UNAVAILABLE: BusUnavailableError,
  TOWER_SSE_BUS_CLOSED: BusClosedError,
  TOWER_SSE_BAD_ID_PROPERTY: BroadcastIdPropertyError,
  TOWER_SSE_BUS_BUSY: BusBusyError,
  TOWER_SSE_PUBLISH_UNKNOWN: PublishOutcomeUnknownError,
  TOWER_SSE_BUS_EVICTABLE: BusEvictableError,
  TOWER_SSE_BUS_START: BusStartError,
  TOWER_SSE_BAD_IDEMPOTENCY_KEY: BroadcastIdempotencyKeyError,
  TOWER_SSE_ALREADY_REGISTERED: AlreadyRegisteredError,
  TOWER_SSE_NOT_REGISTERED: NotRegisteredError,
  TOWER_SSE_ROUTE_OUTSIDE: StreamRouteOutsideError,
  TOWER_SSE_NOT_RETURNED: SubscribeNotReturnedError,
  TOWER_SSE_STREAM_NOT_FOUND: StreamNotFoundError,
  TOWER_SSE_IDEMPOTENCY_CONFLICT: IdempotencyConflictError,
  TOWER_SSE_HOST_NOT_ALLOWED: HostNotAllowedError,
  TOWER_SSE_ORIGIN_NOT_ALLOWED: OriginNotAllowedError
})
