import { createHash } from 'node:crypto'
import type { Bus, Published } from '../bus/bus'
import type { StreamStats } from '../observe/stats'
import { checkEventName, dataText } from '../events/encoder'
import { checkTopic } from '../events/topic'
import { BroadcastIdempotencyKeyError, BroadcastIdPropertyError, IdempotencyConflictError } from '../errors'

const ID_PROPERTY = /^[A-Za-z_$][A-Za-z0-9_$]{0,63}$/
/** What an idempotency key may hold: a UUID, a ULID, base64 or a producer's own counter. */
export const IDEMPOTENCY_KEY = /^[A-Za-z0-9_.:+/=-]{1,128}$/

export interface BroadcastOptions {
  /** The `event:` field; omitted means a plain `message`. */
  event?: string
  /** Only streams granted this topic (or ALL_TOPICS) receive it; without one, every stream does. */
  topic?: string
  /**
   * Put the event's id into the data under this property (data must be a plain object without
   * it): the id is assigned by the bus, so this is how the data can carry the same id as `id:`.
   */
  idProperty?: string
  /**
   * A retry with the same key within history.idempotencyWindowMs publishes nothing new and resolves
   * with the first publish's id: retrying after TOWER_SSE_PUBLISH_UNKNOWN (or any 503) is then safe.
   * The same key with another event rejects with TOWER_SSE_IDEMPOTENCY_CONFLICT.
   */
  idempotencyKey?: string
  /**
   * Whose key it is (a producer's name, or a hash of its credential): keys of different scopes
   * never collide. Stored hashed, never as given.
   */
  idempotencyScope?: string
}

/** What broadcast() resolves with: the id the bus assigned, and how many streams of this instance it was queued for. */
export type BroadcastResult = Published

/**
 * Publishes one event through the bus. Everything is checked here, before the bus has it, so no
 * instance can fail to encode it later; a bad field rejects with its code and publishes nothing.
 */
export function broadcast (bus: Bus, stats: StreamStats, data: unknown, options: BroadcastOptions = {}): Promise<BroadcastResult> {
  const { event, topic, idProperty, idempotencyKey, idempotencyScope } = options
  try {
    if (idempotencyKey !== undefined && (typeof idempotencyKey !== 'string' || !IDEMPOTENCY_KEY.test(idempotencyKey))) {
      throw new BroadcastIdempotencyKeyError(JSON.stringify(idempotencyKey))
    }
    if (topic !== undefined) checkTopic(topic)
    if (event !== undefined) checkEventName(event)
    const text = dataText(data)
    if (idProperty !== undefined) checkIdProperty(idProperty, data, text)
    const counted = (published: Published): Published => {
      stats.broadcast()
      return published
    }
    if (idempotencyKey === undefined) return bus.publish({ data: text, event, topic, idProperty }).then(counted)
    const message = { data: text, event, topic, idProperty, ...scopedIdempotency(idempotencyKey, idempotencyScope, [text, event, topic, idProperty]) }
    return bus.publish(message).then(counted, (error: unknown) => {
      // The bus names the scoped key; the caller knows only its own.
      throw error instanceof IdempotencyConflictError ? new IdempotencyConflictError(JSON.stringify(idempotencyKey)) : error
    })
  } catch (error) {
    return Promise.reject(error)
  }
}

function sha256Hex (text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 32)
}

/**
 * The key as the bus stores it and the hash of the event it stands for. A scope is hashed and set
 * apart by `#`, which no key holds, so no two (scope, key) pairs share a stored key.
 */
function scopedIdempotency (key: string, scope: string | undefined, event: unknown[]): { idempotencyKey: string, idempotencyHash: string } {
  return {
    idempotencyKey: scope === undefined ? key : `${sha256Hex(scope)}#${key}`,
    idempotencyHash: sha256Hex(JSON.stringify(event))
  }
}

function checkIdProperty (name: string, data: unknown, text: string): void {
  if (!ID_PROPERTY.test(name)) {
    throw new BroadcastIdPropertyError(`must be an identifier of at most 64 characters, got ${JSON.stringify(name)}`)
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data) || !text.startsWith('{')) {
    throw new BroadcastIdPropertyError('needs data that is a plain object')
  }
  // Read from what is encoded, not from the object: a toJSON() could add the name, and a client's
  // JSON.parse would then take the last of the two.
  if (Object.hasOwn(JSON.parse(text) as object, name)) {
    throw new BroadcastIdPropertyError(`would set ${JSON.stringify(name)}, which the data already has`)
  }
}
