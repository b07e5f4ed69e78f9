/**
 * Milliseconds on a clock that never steps (performance.now): for every interval measured inside
 * this process — deadlines, rates, lag — so moving the wall clock cannot stretch or shrink one.
 * Wall time (Date.now) is only for what leaves the process: Redis deadlines, timestamps shown.
 */
export const monotonicNow = (): number => performance.now()
