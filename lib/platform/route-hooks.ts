import type { FastifyReply, FastifyRequest } from 'fastify'
import { routeContext } from './internals'

type Done = (error?: Error | null, payload?: unknown) => void
type OnSendHook = (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: Done) => unknown
type OnResponseHook = (request: FastifyRequest, reply: FastifyReply, done: Done) => unknown

/**
 * A stream is written on the raw response after `reply.hijack()`, and Fastify runs neither the
 * route's `onSend` hooks (where @fastify/cookie, and so @fastify/session, set `Set-Cookie`) nor its
 * `onResponse` hooks (request logging, metrics) for a hijacked reply. These run them as Fastify
 * would, in order, each sync or async.
 */

/**
 * Runs the route's onSend hooks on an empty payload for the headers they set; the payload they
 * return is dropped (a stream's body is its own), and so is a content encoding one may claim.
 * Returns undefined when every hook finished synchronously, else a promise; a hook's error throws
 * or rejects.
 */
export function runOnSendHooks (request: FastifyRequest, reply: FastifyReply): void | Promise<void> {
  const hooks = routeContext<{ onSend?: OnSendHook[] | null }>(request)?.onSend
  if (hooks == null || hooks.length === 0) return undefined
  const ran = runInOrder(hooks.length, (i, done) => hooks[i](request, reply, '', done))
  const unencoded = (): void => { reply.removeHeader('content-encoding') }
  if (ran === undefined) return unencoded()
  return ran.then(unencoded)
}

/** How many onSend hooks the route has, its context's included. */
export function onSendHookCount (request: FastifyRequest): number {
  return routeContext<{ onSend?: OnSendHook[] | null }>(request)?.onSend?.length ?? 0
}

/** Whether the route has onResponse hooks (request logging, metrics) to run. */
export function hasOnResponseHooks (request: FastifyRequest): boolean {
  const hooks = routeContext<{ onResponse?: OnResponseHook[] | null }>(request)?.onResponse
  return hooks != null && hooks.length > 0
}

/** Runs the route's onResponse hooks once; their errors are logged, as Fastify logs them. */
export function runOnResponseHooks (request: FastifyRequest, reply: FastifyReply): void {
  const hooks = routeContext<{ onResponse?: OnResponseHook[] | null }>(request)?.onResponse
  if (hooks == null || hooks.length === 0) return
  const ran = runInOrder(hooks.length, (i, done) => hooks[i](request, reply, done))
  const logged = (error: unknown): void => request.log.error({ err: error }, 'tower-sse: an onResponse hook failed for an event stream')
  try {
    if (ran !== undefined) ran.catch(logged)
  } catch (error) {
    logged(error)
  }
}

/**
 * Calls each hook once the one before it is done (its callback, or its returned promise):
 * synchronously all the way while every hook is (returns undefined), else a promise from the
 * first hook that is not. A hook's error throws or rejects, and the rest are not run.
 */
function runInOrder (count: number, call: (i: number, done: Done) => unknown, from = 0): void | Promise<void> {
  for (let i = from; i < count; i++) {
    const later = runOne(call, i)
    if (later !== undefined) return later.then(() => runInOrder(count, call, i + 1))
  }
  return undefined
}

function runOne (call: (i: number, done: Done) => unknown, i: number): Promise<void> | undefined {
  let settled = false
  let outcome: { error: unknown } | undefined
  let later: ((error: unknown) => void) | undefined
  const done: Done = (error) => {
    if (settled) return
    settled = true
    if (later !== undefined) later(error)
    else outcome = { error }
  }
  const result = call(i, done)
  if (outcome !== undefined) {
    if (outcome.error != null) throw outcome.error
    return undefined
  }
  return new Promise<void>((resolve, reject) => {
    later = (error) => error != null ? reject(error) : resolve()
    if (isThenable(result)) result.then(() => done(), (error: unknown) => done(error as Error ?? new Error('a hook rejected')))
  })
}

function isThenable (value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}
