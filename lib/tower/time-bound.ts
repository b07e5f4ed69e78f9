/**
 * The promise's value, or undefined if it has not settled within `ms` (it is then left to settle
 * unobserved): what Tower waits for from Redis must not hang a route or a shutdown on a stalled server.
 */
export function withTimeout<T> (promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined
  const expired = new Promise<undefined>((resolve) => { timer = setTimeout(resolve, ms, undefined) })
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer))
}
