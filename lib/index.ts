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
import { createHub, type SseHub } from './streams/hub'
import { Registry } from './streams/registry'
import { FanOut } from './streams/fan-out'
import { Sweep } from './streams/sweep'
import { StreamStats } from './observe/stats'
import { StreamOpener } from './route/open'
import { addStreamRoutes, type EventStreamReply, type EventStreamRouteOption } from './route/stream-route'
import { WriteCoalescer } from './streams/write-coalescer'
import { Resumables } from './resumable/resumables'
import { createLog } from './resumable/create-log'
import { shareLog } from './resumable/shared-log'

declare module 'fastify' {
  /* eslint-disable @typescript-eslint/no-unused-vars -- an augmentation repeats Fastify's type parameters */
  interface FastifyInstance<RawServer, RawRequest, RawReply, Logger, TypeProvider> {
    /**
     * The streams of the tower-sse registered in this context or above (`broadcast`, `send`,
     * `close`, `stats`…). Typed on every instance, as every Fastify plugin's decorator is; where
     * code may run in a context without tower-sse, `sseOf(fastify)` is the checked way.
     */
    sse: SseHub
  }
  interface FastifyReply {
    /** On a stream route (route option `eventStream`): `return reply.eventStream.subscribe({ … })`. */
    eventStream: EventStreamReply
  }
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
     * admission's early check runs ahead of the route's own onRequest hooks, and the handler returns
     * `reply.eventStream.subscribe()`. `{ keyFn, topicsFromRequest, initialEvent }` override the plugin's for this route.
     */
    eventStream?: EventStreamRouteOption
  }
  /* eslint-enable @typescript-eslint/no-unused-vars */
}

/**
 * The plugin: options normalised once, then the parts wired in the order data flows — request →
 * admission → registry → stream; broadcast → bus → fan-out (encoded once) → each stream's writer.
 */
const towerSsePlugin: FastifyPluginAsync<TowerSseOptions> = async (fastify, rawOptions) => {
  const options = normalizeOptions(rawOptions)
  if (Object.hasOwn(fastify, 'sse')) throw new AlreadyRegisteredError()
  const { clocks } = options
  const counts = new StreamStats()
  const activity = new ActivityLog(counts, options.logIntervalMs)
  const bus = createBus(options.redis, options.history, clocks, fastify.log)
  const registry = new Registry(options.maxClients, counts)
  const admission = new Admission(fastify, registry, bus, counts, options, clocks)
  const fanOut = new FanOut(registry, bus, options.history, counts, clocks.random)
  const sweep = new Sweep(registry, clocks.random)
  const log = createLog(bus, options.redis)
  const resumables = new Resumables(log, fastify.log)
  try {
    await fanOut.start()
  } catch (error) {
    // Nothing left connected by a start that failed: neither the bus's connections nor the log's.
    await resumables.close().catch(() => {})
    await fanOut.close().catch(() => {})
    throw error
  }
  const stats = (): SseStats => counts.read({
    current: registry.size,
    capacity: registry.capacity,
    historyEvents: fanOut.history.size,
    historyBytes: fanOut.history.byteLength,
    openStreamBytes: registry.openStreamBytes(),
    bus: bus.stats()
  }, admission.gauges())
  const hub = createHub(registry, fanOut, async (id) => await resumables.cancel(id), counts, stats)
  fastify.decorate('sse', hub)
  // Lent to tower-sse/mcp's event store by this hub, outside the public API (see resumable/shared-log.ts).
  const unshareLog = shareLog(hub, log)
  if (options.metrics !== undefined) {
    // Loaded only here, so an application without the option never loads prom-client.
    const { registerMetrics } = require('./observe/metrics') as typeof import('./observe/metrics')
    const busState = bus.shared
      ? () => {
          const { state, lagMs, reads, refusedPublishes } = bus.stats()
          return { up: state === 'up', outOfMemory: state === 'oom', lagSeconds: lagMs / 1000, reads, refusedPublishes }
        }
      : undefined
    const unregister = registerMetrics(options.metrics, { stats, timeBroadcasts: (observe) => fanOut.timeBroadcasts(observe) }, busState)
    fastify.addHook('onClose', (_instance, hookDone) => {
      unregister()
      hookDone()
    })
  }

  // Every stream of this registration: one byte budget, one flush per turn (see
  // lib/streams/write-coalescer.ts), admission's jittered retry: before every end the server chooses.
  const context = { maxBufferedBytes: options.maxBufferedBytes, coalescer: new WriteCoalescer(), retryFrame: admission.retryFrame, finished: registry.remove }
  const opener = new StreamOpener(registry, fanOut, resumables, admission, counts, options, context, clocks)
  // Each stream route of this context (and of contexts below without their own registration)
  // shares this registry: one capacity, one heartbeat, one bus. Its first onRequest hooks, in
  // order: the Host/Origin guard (a refused request is never counted by admission), then
  // admission's cheap early check.
  addStreamRoutes(fastify, {
    opener,
    stats: counts,
    path: options.path,
    // No guard asked for, no hook: every hook costs each stream its turn in Fastify's runner.
    first: options.guard.allowedHosts === undefined && options.guard.allowedOrigins === undefined
      ? [admission.onRequest]
      : [streamGuard(options.guard), admission.onRequest],
    owns: (instance) => instance.sse === hub,
    closing: takeOverClosingRequests(fastify, admission.refuseClosing)
  })

  // One timer for every stream's heartbeat and one for the log summary; neither keeps the process alive.
  const heartbeatTimer = setInterval(() => sweep.heartbeat(), options.heartbeatMs).unref()
  const logTimer = setInterval(() => activity.flush(fastify.log, registry.size), options.logIntervalMs).unref()

  // Streams never end by themselves, so they must be ended before close() waits on connections.
  fastify.addHook('preClose', async () => {
    admission.close()
    unshareLog()
    await sweep.drain(options.drainMs)
  })
  fastify.addHook('onClose', (_instance: FastifyInstance, hookDone) => {
    clearInterval(heartbeatTimer)
    clearInterval(logTimer)
    sweep.stop()
    activity.flush(fastify.log, registry.size)
    resumables.close().then(async () => await fanOut.close()).then(() => hookDone(), hookDone)
  })
}

/** The tower-sse Fastify plugin: `app.register(towerSse, options)`. */
const towerSse = fp(towerSsePlugin, { fastify: '5.x', name: 'tower-sse' })

export default towerSse
export { towerSse }
export { DEFAULTS } from './options'
export { streamGuard } from './admission/request-guard'
export { topicProblem, ALL_TOPICS } from './events/topic'
export { topicsFromQuery } from './route/stream-request'
export { errorCodes, REFUSAL_CODES } from './errors'
export { keyByAddress, keyFromClientId } from './admission/request-key'
export { sseOf } from './streams/sse-of'
export type { TowerSseOptions } from './options'
export type { StormOptions, ConnectRateOptions } from './admission/admission-options'
export type { HistoryOptions } from './events/history-options'
export type { RedisOption, RedisBusGroup, RedisClientLike } from './bus/redis/redis-options'
export type { StreamGuardOptions } from './admission/request-guard'
export type { MetricsRegistryLike } from './observe/metrics-option'
export type { SseEventInit, SseEvent } from './events/encoder'
export type { SseClientInfo } from './streams/subscriber'
export type { InitialEvent, StreamRouteOptions } from './route/route-options'
export type { SubscribeOptions } from './route/open'
export type { PerRequestStream, StreamSource, StreamContext } from './route/per-request'
export type { StreamHandle, StreamEnd } from './route/stream-handle'
export type { EventStreamReply, EventStreamRouteOption } from './route/stream-route'
export type { TopicsFromRequest, TopicsGranted, AllowTopic } from './route/stream-request'
export type { KeyFn } from './admission/request-key'
export type { AddressGrouping } from './admission/address-key'
export type { BroadcastOptions, BroadcastResult } from './streams/broadcast'
export type { StreamAddress } from './streams/registry'
export type { SseStats, AppCloseReason, BusStats } from './observe/vocabulary'
export type { SseHub } from './streams/hub'

// CommonJS consumers get the plugin itself from require('tower-sse'), like every official
// Fastify plugin, with the named exports and `.default` hanging off it.
module.exports = Object.assign(towerSse, module.exports)
