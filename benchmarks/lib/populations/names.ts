/** The client populations, in table order, with what each one does. */
export const POPULATIONS = {
  browser: 'spec EventSource: reconnects after retry: when a stream ends, gives up on a non-200',
  dashboard: 'EventSource plus a manual reconnect 2–5 s after it gave up (upstream\'s patch)',
  backoff: 'editor extension: 1 s·2^n backoff capped at 30 s, n reset by every 200',
  hammer: 'reconnects 50 ms after any end or refusal on a new TCP connection, ignores Retry-After and retry:',
  autocannon: 'autocannon at a fixed overall rate, a new TCP connection per request',
  client: 'tower-sse/client with its defaults: honours Retry-After, jittered backoff'
} as const

export type PopulationName = keyof typeof POPULATIONS

export const POPULATION_NAMES = Object.keys(POPULATIONS) as PopulationName[]
