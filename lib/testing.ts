import { createParser, type EventSourceMessage } from 'eventsource-parser'
import type { FastifyInstance, InjectOptions } from 'fastify'
import { TEST_CLOCKS, type TowerSseOptions } from './options'
import type { Clocks } from './shared/clocks'

export type { Clocks }

/**
 * The plugin's options with test clocks: `app.register(towerSse, withTestClocks({ maxClients: 2 },
 * { random: () => 0.5, monotonicNow: () => t }))`. `random` draws every jitter (0.5: each delay at its
 * value), `monotonicNow` every interval admission and the memory bus measure (storm seconds, the
 * connect rate, the idempotency window), `now` what `subscribe({ expiresAt })` is read against.
 * Clocks are no option of their own: production code has no reason to set them.
 */
export function withTestClocks (options: TowerSseOptions, clocks: Partial<Clocks>): TowerSseOptions {
  return { ...options, [TEST_CLOCKS]: clocks } as TowerSseOptions
}

/** One stream opened with `fastify.inject`, read as a client would. */
export interface InjectedStream {
  readonly statusCode: number
  readonly headers: Record<string, string | string[] | number | undefined>
  /** The next `count` events (parsed with eventsource-parser; `retry:` and comments are not events). Rejects if the stream ends first. */
  events: (count: number) => Promise<EventSourceMessage[]>
  /** Leaves like a client: the connection goes; resolves once the server side has closed, so the slot is free. */
  close: () => Promise<void>
}

/**
 * `tower-sse/testing`: opens a stream with `app.inject` — no port. A plain inject() never resolves
 * (a stream does not end), so the response is read as it comes (payloadAsStream); and destroying
 * that payload stream never reaches the server (light-my-request's response is a copy), so close()
 * destroys the server's response, as a client's leaving does, which frees the slot.
 */
export async function injectStream (app: FastifyInstance, request: string | InjectOptions): Promise<InjectedStream> {
  const options: InjectOptions = typeof request === 'string' ? { url: request } : request
  const response = await app.inject({ method: 'GET', ...options, payloadAsStream: true })
  const serverSide = response.raw.res
  const closed = new Promise<void>((resolve) => {
    if (serverSide.closed) resolve()
    else serverSide.once('close', () => resolve())
  })
  const queue: EventSourceMessage[] = []
  let ended = false
  let wake = (): void => {}
  const parser = createParser({ onEvent: (event) => { queue.push(event); wake() } })
  const body = response.stream()
  body.setEncoding('utf8')
  body.on('data', (chunk: string) => parser.feed(chunk))
  body.once('end', () => { ended = true; wake() })
  return {
    statusCode: response.statusCode,
    headers: response.headers,
    async events (count) {
      while (queue.length < count) {
        if (ended) throw new Error(`tower-sse/testing: the stream ended after ${queue.length} of ${count} events`)
        await new Promise<void>((resolve) => { wake = resolve })
      }
      return queue.splice(0, count)
    },
    async close () {
      // As a client leaving does: the connection goes, the response with it, and nothing errs
      // (aborting the inject instead would end the response with an AbortError Fastify logs).
      serverSide.destroy()
      await closed
    }
  }
}

export type { EventSourceMessage }
