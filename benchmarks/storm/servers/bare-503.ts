import { EVENTS_PATH, type ServerSetup } from './contract'

const BODY = JSON.stringify({ statusCode: 503, error: 'Service Unavailable', message: 'no stream free; retry after 5 s' })

/**
 * The rejection path's baseline: a bare Fastify route answering every request with a 503 on the
 * same terms as tower-sse's refusal (Retry-After, small JSON body, `Connection: close`).
 */
export const setupBare503: ServerSetup = async (app) => {
  let rejected = 0
  app.get(EVENTS_PATH, (_request, reply) => {
    rejected++
    void reply
      .code(503)
      .header('retry-after', '5')
      .header('cache-control', 'no-store')
      .header('connection', 'close')
      .type('application/json; charset=utf-8')
      .send(BODY)
  })
  return () => ({ admitted: 0, rejected, evicted: 0, expired: 0, open: 0 })
}
