import type { FastifyPluginCallback, FastifySchemaValidationError } from 'fastify'
import { IDEMPOTENCY_KEY } from '../streams/broadcast'
import { sseOf, topicProblem } from '..'
import { NotifyValidationError } from './errors'
import { TOWER_ROUTES } from './routes'

/** What a producer (editor extension, CLI, CI hook) posts to POST /api/notify. */
export interface Notification {
  type: string
  title: string
  body: string
  /** Sent as the event's topic: streams subscribed with ?topics= get only their workspaces. */
  workspace?: string
}

/** The data of the SSE message every client receives: the notification plus its id. */
export interface SentNotification extends Notification {
  id: string
}

export interface NotifyReply {
  /** The notification's id, which is also its SSE `id:` (what a client resumes from). */
  id: string
  /** Streams the notification was queued for. */
  delivered: number
}

// The first message of every stream is {"type":"connected"}: a notification may not pose as it.
const RESERVED_TYPE = 'connected'

const FIELDS = ['type', 'title', 'body', 'workspace'] as const

const bodySchema = {
  type: 'object',
  required: ['type', 'title', 'body'],
  additionalProperties: false,
  properties: {
    type: { type: 'string', minLength: 1, maxLength: 64, not: { const: RESERVED_TYPE } },
    title: { type: 'string', minLength: 1, maxLength: 200 },
    body: { type: 'string', maxLength: 4000 },
    // Its length and characters are the plugin's topic rule, checked by topicProblem below.
    workspace: { type: 'string' }
  }
} as const

/** Turns ajv's first error into a sentence that says which field is wrong and how. */
function describeError (error: FastifySchemaValidationError, dataVar: string): string {
  const where = `${dataVar}${error.instancePath}`
  switch (error.keyword) {
    case 'additionalProperties':
      return `${dataVar} has an unknown property ${JSON.stringify(error.params.additionalProperty)} (allowed: ${FIELDS.join(', ')})`
    case 'required':
      return `${dataVar} is missing the required property ${JSON.stringify(error.params.missingProperty)}`
    case 'not':
      return `${where} ${JSON.stringify(RESERVED_TYPE)} is reserved for the first message of every stream`
    case 'minLength':
      return `${where} must not be empty`
    default:
      return `${where} ${error.message ?? 'is invalid'}`
  }
}

const BODY_LIMIT_BYTES = 16 * 1024
/** Redis reconnects with a backoff capped at a few seconds: a producer retrying after this finds it back. */
const BUS_DOWN_RETRY_AFTER_SECONDS = 2

/** Refused or unanswered by the bus: a retry later may succeed (with the same Idempotency-Key, at most once). */
const RETRYABLE = new Set(['TOWER_SSE_BUS_UNAVAILABLE', 'TOWER_SSE_BUS_CLOSED', 'TOWER_SSE_BUS_BUSY', 'TOWER_SSE_PUBLISH_UNKNOWN'])

function isBusDown (error: unknown): boolean {
  return RETRYABLE.has((error as { code?: unknown } | null)?.code as string)
}

export interface NotifyRouteOptions {
  /** Whose Idempotency-Keys these are: a hash of the notify token (never the token), or a fixed name without one. */
  scope: string
}

/**
 * POST /api/notify: validates one notification and broadcasts it to every open stream as one
 * SSE message. Types are not coerced and unknown properties are refused, not dropped: that is
 * configured on Tower's ajv (see app.ts). An `Idempotency-Key` header makes a retry land once.
 */
export const notifyRoute: FastifyPluginCallback<NotifyRouteOptions> = (fastify, options, done) => {
  fastify.post<{ Body: Notification, Reply: NotifyReply }>(TOWER_ROUTES.notify, {
    bodyLimit: BODY_LIMIT_BYTES,
    schema: { body: bodySchema },
    schemaErrorFormatter: (errors, dataVar) => new NotifyValidationError(errors.map((e) => describeError(e, dataVar)).join('; '))
  }, async (request, reply) => {
    const { workspace } = request.body
    const idempotencyKey = request.headers['idempotency-key']
    if (idempotencyKey !== undefined && (typeof idempotencyKey !== 'string' || !IDEMPOTENCY_KEY.test(idempotencyKey))) {
      throw new NotifyValidationError(`header Idempotency-Key must be one value of 1-128 characters of A-Z a-z 0-9 _ . : + / = -, got ${JSON.stringify(idempotencyKey).slice(0, 200)}`)
    }
    const problem = workspace === undefined ? null : topicProblem(workspace)
    if (problem !== null) throw new NotifyValidationError(`body/workspace (the event's topic): ${problem}`)
    // The bus assigns the id, so the plugin puts it into the data as `id` (SentNotification) when it
    // encodes the event: the notification's id is its SSE `id:` on every instance. The workspace
    // becomes the plugin's topic here and nowhere else.
    try {
      return await sseOf(fastify).broadcast(request.body, { topic: workspace, idProperty: 'id', idempotencyKey, idempotencyScope: options.scope })
    } catch (error) {
      // Not published (or, TOWER_SSE_PUBLISH_UNKNOWN, perhaps published): nothing is queued, so the
      // producer may post it again later, with the same Idempotency-Key to make it land once.
      if (isBusDown(error)) void reply.header('retry-after', String(BUS_DOWN_RETRY_AFTER_SECONDS))
      throw error
    }
  })
  done()
}
