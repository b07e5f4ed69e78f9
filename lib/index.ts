import type {
  ContextConfigDefault, FastifyBaseLogger, FastifyInstance, FastifyPluginAsync, FastifySchema, FastifyTypeProvider,
  FastifyTypeProviderDefault, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerBase, RawServerDefault,
  RouteGenericInterface
} from 'fastify'
import fp from 'fastify-plugin'
import { ActivityLog } from './observe/activity-log'
import { Admission } from './admission/admission'
import { streamGuard } from './admission/request-guard'
import { takeOverClosingRequests } from './platform/request-takeover'
import { AlreadyRegisteredError } from './errors'
import { normalizeOptions, type TowerSseOptions } from './options'
import type { SseStats } from './observe/vocabulary'
import { createBus } from './bus'
import { hubOf } from './streams/hub'
import { hubIn } from './streams/sse-of'
import { SseRegistry } from './streams/registry'
import { StreamStats } from './observe/stats'
import { StreamOpener } from './stream/open'
import { addStreamRoutes, type EventStreamReply, type EventStreamRouteOption } from './stream/routes'
import { WriteCoalescer } from './streams/write-coalescer'

declare module 'fastify' {
  interface FastifyReply {
    /** On a stream route (route option `eventStream`): `reply.eventStream.subscribe({ topics, key, lastEventId, initialEvent })`. */
    eventStream: EventStreamReply
  }
  /* eslint-disable @typescript-eslint/no-unused-vars -- an augmentation repeats Fastify's type parameters */
  interface RouteShorthandOptions<
    RawServer extends RawServerBase = RawServerDefault,
    RawRequest extends RawRequestDefaultExpression<RawServer> = RawRequestDefaultExpression<RawServer>,
    RawReply extends RawReplyDefaultExpression<RawServer> = RawReplyDefaultExpression<RawServer>,
    RouteGeneric extends RouteGenericInterface = RouteGenericInterface,
    ContextConfig = ContextConfigDefault,
    SchemaCompiler extends FastifySchema = FastifySchema,
    TypeProvider extends FastifyTypeProvider = FastifyTypeProviderDefault,
    Logger extends FastifyBaseLogger = FastifyBaseLogger
  > {
    /**
     * Makes this route an event stream of the tower-sse registered in its context (or above):
     * admission's early check runs ahead of the route's own onRequest hooks, and the handler calls
     * `reply.eventStream.subscribe()`. `{ keyFn, topicsFromRequest, initialEvent }` override the plugin's for this route.
     */
    eventStream?: EventStreamRouteOption
  }
  /* eslint-enable @typescript-eslint/no-unused-vars */
}

const towerSsePlugin: FastifyPluginAsync<TowerSseOptions> = async (fastify, rawOptions) => {
  const options = normalizeOptions(rawOptions)
  if (Object.hasOwn(fastify, 'sse')) throw new AlreadyRegisteredError()
  const counts = new StreamStats()
  const activity = new ActivityLog(counts, { windowMs: options.logIntervalMs, stormConnectsPerMinute: options.stormConnectsPerMinute })
  const registry = new SseRegistry({ capacity: options.maxClients, historyMaxEvents: options.historyMaxEvents, historyMaxBytes: options.historyMaxBytes }, counts, createBus(options, fastify.log), options.random)
  const admission = new Admission(fastify, registry, counts, options)
  // Streams the registry ends while the bus is deaf get admission's jittered retry:.
  await registry.start(() => admission.retryFrame())
  // One flush per turn for every stream written to in that turn (see lib/streams/write-coalescer.ts).
  const turn = new WriteCoalescer()
  const stats = (): SseStats => counts.read(registry.gauges(), admission.gauges())
  const hub = hubOf(registry, stats)
  fastify.decorate('sse', hub)
  if (options.metrics !== undefined) {
    // Loaded only here, so an application without the option never loads prom-client.
    const { registerMetrics } = require('./observe/metrics') as typeof import('./observe/metrics')
    const busState = registry.bus.shared
      ? () => {
          const { state, lagMs, reads, refusedPublishes } = registry.bus.stats()
          return { up: state === 'up', outOfMemory: state === 'oom', lagSeconds: lagMs / 1000, reads, refusedPublishes }
        }
      : undefined
    const unregister = registerMetrics(options.metrics, { stats, timeBroadcasts: (observe) => registry.timeBroadcasts(observe) }, busState)
    fastify.addHook('onClose', (_instance, hookDone) => {
      unregister()
      hookDone()
    })
  }

  // Every stream route's first onRequest hooks, in order: the Host/Origin guard (a refused request
  // is never counted by admission), then admission's cheap early check.
  const early = [streamGuard(options), admission.onRequest]
  // Each stream route of this context (and of contexts below without their own registration)
  // shares this registry: one capacity, one heartbeat, one bus.
  const opener = new StreamOpener(registry, admission, counts, options, turn)
  addStreamRoutes(fastify, opener, options, early, (instance) => hubIn(instance) === hub, takeOverClosingRequests(fastify, admission.refuseClosing))

  // One timer for every client's heartbeat and one for the log summary; neither keeps the process alive.
  const heartbeatTimer = setInterval(() => registry.heartbeat(), options.heartbeatMs).unref()
  const logTimer = setInterval(
    () => activity.flush(fastify.log, registry.size),
    options.logIntervalMs
  ).unref()

  // Streams never end by themselves, so they must be ended before close() waits on connections.
  fastify.addHook('preClose', async () => {
    admission.close()
    await registry.drain(options.drainMs, () => admission.retryFrame(), options.random)
  })
  fastify.addHook('onClose', (_instance: FastifyInstance, hookDone) => {
    clearInterval(heartbeatTimer)
    clearInterval(logTimer)
    activity.flush(fastify.log, registry.size)
    registry.close().then(() => hookDone(), hookDone)
  })
}

/** The tower-sse Fastify plugin: `app.register(towerSse, options)`. */
const towerSse = fp(towerSsePlugin, { fastify: '5.x', name: 'tower-sse' })

export default towerSse
export { towerSse }
export { DEFAULTS } from './options'
export { streamGuard } from './admission/request-guard'
export { topicProblem, ALL_TOPICS, MAX_TOPICS, MAX_TOPIC_LENGTH } from './events/topic'
export { topicsFromQuery } from './stream/stream-request'
export type { StreamGuardOptions } from './admission/request-guard'
export {
  errorCodes, REFUSAL_CODES, TowerSseOptionError, SubscriptionError, TopicError, TopicForbiddenError, BroadcastIdPropertyError,
  EventFieldError, UnencodableDataError, RetryValueError, RegistryFullError, BusUnavailableError, BusClosedError,
  BusBusyError, PublishOutcomeUnknownError, BusEvictableError, BusStartError, BroadcastIdempotencyKeyError, IdempotencyConflictError, AlreadyRegisteredError, NotRegisteredError,
  HostNotAllowedError, OriginNotAllowedError
} from './errors'
export type { TowerSseOptions, SseEventInit, SseClientInfo, RedisClientLike, InitialEvent, MetricsRegistryLike } from './options'
export type { StreamRouteOptions, SubscribeOptions } from './stream/open'
export type { PerRequestStream } from './stream/per-request'
export type { EventStreamReply, EventStreamRouteOption } from './stream/routes'
export type { TopicsFromRequest, TopicsGranted, AllowTopic } from './stream/stream-request'
export type { KeyFn } from './admission/request-key'
export { defaultKeyFn, keyByAddress, keyFromClientId } from './admission/request-key'
export type { AddressGrouping } from './admission/address-key'
export type { BroadcastOptions, BroadcastResult, StreamAddress } from './streams/registry'
export type { SseStats, AppCloseReason } from './observe/vocabulary'
export type { SseHub } from './streams/hub'
export { sseOf } from './streams/sse-of'
export type { BusStats } from './bus/bus'

// CommonJS consumers get the plugin itself from require('tower-sse'), like every official
// Fastify plugin, with the named exports and `.default` hanging off it.
module.exports = Object.assign(towerSse, module.exports)
