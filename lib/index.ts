import { randomUUID } from 'node:crypto'
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { ActivityLog } from './activity-log'
import { Admission } from './admission/admission'
import { UNDER_PRESSURE_ROUTE_CONFIG } from './admission/under-pressure'
import { streamGuard } from './admission/request-guard'
import { Subscriber, STREAM_HEADERS } from './subscriber'
import { endAndClose, openUntilClose } from './close-first'
import { takeOverClosingRequests } from './closing-takeover'
import { encodeEvent } from './encoder'
import { jitter } from './jitter'
import { normalizeOptions, type TowerSseOptions } from './options'
import type { SseStats } from './outcomes'
import { createBus } from './bus/index'
import { hubOf, type SseHub } from './hub'
import { SseRegistry } from './registry'
import { StreamStats } from './stats'
import { SubscriptionError } from './errors'
import { readSubscription, type Subscription } from './subscription'
import { TurnFlush } from './turn-flush'

declare module 'fastify' {
  interface FastifyInstance {
    /** tower-sse's streams: broadcast, size, capacity, hasRoom, lastEventId, stats() and the open clients. */
    sse: SseHub
  }
}

const towerSsePlugin: FastifyPluginAsync<TowerSseOptions> = async (fastify, rawOptions) => {
  const options = normalizeOptions(rawOptions)
  const counts = new StreamStats()
  const activity = new ActivityLog(counts, { windowMs: options.logIntervalMs, stormConnectsPerMinute: options.stormConnectsPerMinute })
  const registry = new SseRegistry({ capacity: options.maxClients, historyMaxEvents: options.historyMaxEvents, historyMaxBytes: options.historyMaxBytes }, counts, createBus(options, fastify.log), options.random)
  await registry.start()
  const admission = new Admission(fastify, registry, counts, options)
  // One flush per turn for every stream written to in that turn (see lib/turn-flush.ts).
  const turn = new TurnFlush()
  const stats = (): SseStats => counts.read(registry.gauges(), admission.gauges())
  fastify.decorate('sse', hubOf(registry, stats))
  takeOverClosingRequests(fastify, fastify.prefix + options.path, admission.refuseClosing)
  if (options.metrics !== undefined) {
    // Loaded only here, so an application without the option never loads prom-client.
    const { registerMetrics } = require('./metrics') as typeof import('./metrics')
    const busState = registry.bus.shared
      ? () => {
          const { state, lagMs, reads } = registry.bus.stats()
          return { up: state === 'up', lagSeconds: lagMs / 1000, reads }
        }
      : undefined
    const unregister = registerMetrics(options.metrics, { stats, timeBroadcasts: (timer) => registry.timeBroadcasts(timer) }, busState)
    fastify.addHook('onClose', (_instance, hookDone) => {
      unregister()
      hookDone()
    })
  }

  // HEAD (which Fastify would otherwise derive from GET) gets the stream's headers and the close at
  // once: a stream answered without a body would hold a slot and a `curl -I` until max age.
  fastify.head(options.path, (_request, reply) => {
    reply.hijack()
    openUntilClose(reply.raw, 200, STREAM_HEADERS)
    endAndClose(reply.raw)
  })
  fastify.route({
    method: 'GET',
    url: options.path,
    config: UNDER_PRESSURE_ROUTE_CONFIG,
    // The Host/Origin guard first: a refused request is never counted by admission.
    onRequest: [streamGuard(options), admission.onRequest],
    handler: (request: FastifyRequest, reply: FastifyReply) => {
      const key = admission.recheck(request, reply)
      if (key === null) return
      let subscription: Subscription
      try {
        subscription = readSubscription(request, options.topicsFromRequest)
      } catch (error) {
        if (!(error instanceof SubscriptionError)) throw error
        void reply.code(400).send(error)
        return
      }
      reply.hijack()
      const client = new Subscriber(randomUUID(), request.ip, key, subscription.topics, reply.raw, options, registry.remove, turn)
      const lifetimeMs = options.maxAgeMs > 0
        ? jitter(options.maxAgeMs, options.maxAgeJitterMs, options.random, 1)
        : null
      client.open(admission.retryFrame(), lifetimeMs)
      admission.streamOpened(request)
      const first = options.initialEvent?.(client, request)
      if (first !== undefined) client.write(encodeEvent(first))
      registry.add(client, subscription.lastEventId)
    }
  })

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
export { DEFAULTS, normalizeOptions } from './options'
export type { NormalizedOptions } from './options'
export { isValidTopic } from './subscription'
export { streamGuard, parseHost, parseAllowedHost, isAllowedHost } from './admission/request-guard'
export type { StreamGuardOptions } from './admission/request-guard'
export { IDEMPOTENCY_KEY } from './registry'
export {
  errorCodes, REFUSAL_CODES, TowerSseOptionError, SubscriptionError, BroadcastTopicError, BroadcastIdPropertyError,
  EventFieldError, UnencodableDataError, RetryValueError, RegistryFullError, BusUnavailableError, BusClosedError,
  BusBusyError, PublishOutcomeUnknownError, BusEvictableError, BroadcastIdempotencyKeyError, HostNotAllowedError, OriginNotAllowedError
} from './errors'
export type { TowerSseOptions, SseEventInit, SseClientInfo, RedisClientLike, MetricsRegistryLike } from './options'
export type { TopicsFromRequest } from './subscription'
export type { KeyFn } from './request-key'
export { defaultKeyFn, keyFromClientId } from './request-key'
export type { BroadcastOptions, BroadcastResult } from './registry'
export type { SseStats } from './outcomes'
export type { SseHub } from './hub'
export type { BusStats } from './bus/bus'
// The `redis` option's URL, read and shown without its password; the connection itself is `tower-sse/redis`.
export { parseRedisUrl, redactRedisUrl } from './bus/redis-url'
export { encodeEvent, encodeRetry } from './encoder'

// CommonJS consumers get the plugin itself from require('tower-sse'), like every official
// Fastify plugin, with the named exports and `.default` hanging off it.
module.exports = Object.assign(towerSse, module.exports)
