import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyReply } from 'fastify'

/**
 * Headers that describe a finite body or one hop (RFC 9110 §7.6.1): never carried from the reply
 * onto a stream or a refusal, whose framing (no length, server closes) tower-sse owns.
 */
const FRAMING = ['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'proxy-connection', 'upgrade']

/**
 * What the app and its plugins set on the reply so far (CORS, cookies, rate-limit, helmet, a
 * hook's request id) with tower-sse's own on top: `own` wins only for the names it carries. The
 * stream and every refusal are written on the raw response after `reply.hijack()`, which would
 * otherwise drop everything set through the reply.
 */
export function withReplyHeaders (reply: FastifyReply, own: OutgoingHttpHeaders): OutgoingHttpHeaders {
  const headers = { ...reply.getHeaders() } as OutgoingHttpHeaders
  for (const name of FRAMING) delete headers[name]
  return Object.assign(headers, own)
}
