import type { ServerResponse } from 'node:http'
import { Socket } from 'node:net'
import type { Http2ServerResponse } from 'node:http2'
import { createRequire } from 'node:module'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type FindMyWayRouter from 'find-my-way'

/**
 * Every Fastify or Node internal tower-sse relies on, behind one door. Each is pinned by
 * test/platform.test.ts, so an upgrade that moves one fails there, loudly, rather than quietly
 * turning a guard off.
 */

/** What the instance (or the root it inherits from) keeps under `Symbol(description)`. */
function fastifyInternal<T> (fastify: FastifyInstance, description: string): T | undefined {
  for (let proto: object | null = fastify; proto !== null; proto = Object.getPrototypeOf(proto)) {
    const symbol = Object.getOwnPropertySymbols(proto).find((s) => s.description === description)
    if (symbol !== undefined) return (proto as Record<symbol, T>)[symbol]
  }
  return undefined
}

/**
 * Fastify's closing flag: once `close()` starts, Fastify's router answers every request itself
 * (`return503OnClosing`) before any route hook runs. It lives under the instance's
 * `Symbol('fastify.state')` (Fastify 4 and 5); undefined when this Fastify keeps it elsewhere.
 */
export function fastifyState (fastify: FastifyInstance): { closing?: boolean } | undefined {
  return fastifyInternal(fastify, 'fastify.state')
}

/**
 * Whether Fastify answers requests itself while closing: its `return503OnClosing` option, which
 * `initialConfig` does not carry; the options live under `Symbol('fastify.options')`.
 */
export function answers503OnClosing (fastify: FastifyInstance): boolean {
  return fastifyInternal<{ return503OnClosing?: boolean }>(fastify, 'fastify.options')?.return503OnClosing !== false
}

/**
 * Fastify's own router, find-my-way, loaded from fastify's dependencies (a plugin user installs
 * nothing more): matching a URL by the rules of the very version Fastify routes with.
 */
export const FindMyWay = createRequire(require.resolve('fastify'))('find-my-way') as typeof FindMyWayRouter

/** The matching rules of a router, as find-my-way takes them. */
export type RouterRules = Pick<FindMyWayRouter.Config<FindMyWayRouter.HTTPVersion.V1>,
  'ignoreTrailingSlash' | 'ignoreDuplicateSlashes' | 'caseSensitive' | 'maxParamLength' | 'allowUnsafeRegex' | 'constraints'> & { useSemicolonDelimiter?: boolean }

/**
 * The rules Fastify's router matches URLs by (trailing and duplicate slashes, case, parameter
 * length, constraint strategies given to Fastify()): the `routerOptions` of the options under
 * `Symbol('fastify.options')`; undefined when this Fastify keeps them elsewhere.
 */
export function routerRules (fastify: FastifyInstance): RouterRules | undefined {
  const options = fastifyInternal<{ routerOptions?: RouterRules }>(fastify, 'fastify.options')?.routerOptions
  if (options === undefined) return undefined
  const { ignoreTrailingSlash, ignoreDuplicateSlashes, caseSensitive, maxParamLength, allowUnsafeRegex, useSemicolonDelimiter, constraints } = options
  return { ignoreTrailingSlash, ignoreDuplicateSlashes, caseSensitive, maxParamLength, allowUnsafeRegex, useSemicolonDelimiter, constraints }
}

/**
 * Whether this request waits behind another response on its connection. Node's HTTP/1 server
 * parses pipelined requests at once but attaches only the first response to the socket; the
 * others have `res.socket === null` until their turn and never see the socket close.
 */
export function isPipelinedBehind (res: ServerResponse): boolean {
  return res.socket === null
}

/** Whether `res` is one stream of an HTTP/2 session (Node's compatibility layer) rather than HTTP/1. */
export function isHttp2 (res: ServerResponse): boolean {
  return res.req.httpVersionMajor >= 2
}

/** The HTTP/2 stream behind a compatibility-layer response. */
function streamOf (res: ServerResponse): Http2ServerResponse['stream'] {
  return (res as unknown as Http2ServerResponse).stream
}

/**
 * Whether the response's own buffer is past its high-water mark. Under HTTP/2 the compatibility
 * response has no `writableNeedDrain`; its stream does.
 */
export function needsDrain (res: ServerResponse): boolean {
  return isHttp2(res) ? streamOf(res).writableNeedDrain : res.writableNeedDrain
}

/**
 * Bytes handed to the transport but not sent yet, below the response's own buffer. A write that
 * is under way shrinks `writableLength` only when it completes as a whole, so a reader taking a
 * burst slowly shows its progress only here. HTTP/1: the socket handle's queue. HTTP/2: this
 * stream's queue (`bufferSize` less `writableLength`) — `res.socket._handle` there is the whole
 * session's socket, which another stream's progress would move.
 */
export function unsentBytes (res: ServerResponse): number {
  if (isHttp2(res)) {
    const stream = streamOf(res)
    return stream.bufferSize - stream.writableLength
  }
  return (res.socket as { _handle?: { writeQueueSize?: number } } | null)?._handle?.writeQueueSize ?? 0
}

/**
 * Whether the client is gone: its request can never be answered. HTTP/1: Node destroys the
 * response once its socket closes. HTTP/2: the compatibility response stays `writable` and has no
 * `destroyed` after the client's RST_STREAM; only its stream says so (`closed`, `destroyed`).
 */
export function hasLeft (res: ServerResponse): boolean {
  if (isHttp2(res)) {
    const stream = streamOf(res)
    return stream.closed || stream.destroyed
  }
  return res.destroyed || !res.writable
}

/**
 * The socket an HTTP/1 response's body may be written to directly, bypassing the response, or
 * null. Only a connection's own socket (a net.Socket), for a body that runs until it closes: not
 * chunked, no length (`_contentLength`, set from the head), whose head is already on the socket
 * (`_headerSent`) and which holds nothing back itself (its `writableLength` is the socket's: Node
 * writes an attached response straight to its socket and keeps bytes in its own `outputData` only
 * while it waits for one). What is written there goes out in order with what the response writes
 * later (its end).
 */
export function bodySocket (res: ServerResponse): Socket | null {
  const head = res as unknown as { _headerSent?: boolean, _contentLength?: number | null }
  if (isHttp2(res) || res.chunkedEncoding || head._contentLength != null || head._headerSent !== true) return null
  const socket = res.socket
  // Not a connection: fastify.inject's (light-my-request) response sits on a stand-in Writable and
  // reads the body from the response's own writes.
  if (!(socket instanceof Socket) || res.writableLength !== socket.writableLength) return null
  return socket
}

/** Fastify's symbol for a request's route context, found on the first request (one per Fastify copy). */
let contextSymbol: symbol | undefined

/** The route's context Fastify keeps on each request (its hooks, bound), under `Symbol('fastify.context')`. */
export function routeContext<T> (request: FastifyRequest): T | undefined {
  if (contextSymbol === undefined || !Object.hasOwn(request, contextSymbol)) {
    contextSymbol = Object.getOwnPropertySymbols(request).find((s) => s.description === 'fastify.context')
  }
  return contextSymbol === undefined ? undefined : (request as unknown as Record<symbol, T>)[contextSymbol]
}

/**
 * The root instance of `fastify`'s tree: every context is created from its parent with
 * Object.create, so the root is the last object of the prototype chain that holds a list of its
 * own child contexts (`Symbol('fastify.children')`).
 */
export function rootOf (fastify: FastifyInstance): FastifyInstance {
  let root = fastify
  for (let proto: object | null = fastify; proto !== null; proto = Object.getPrototypeOf(proto)) {
    if (Object.getOwnPropertySymbols(proto).some((s) => s.description === 'fastify.children')) root = proto as FastifyInstance
  }
  return root
}
