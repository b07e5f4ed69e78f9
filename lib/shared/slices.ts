/**
 * Items a pump pulls from an app's iterable before it lets the event loop turn (nextTurn): an
 * iterable that is always ready (a buffered cursor, a canned answer) resolves in microtasks only,
 * and a thousand of them pulling a thousand events each held the loop for seconds (bench:resume:
 * the bus's receive probe unread past its deadline, streams refused TOWER_SSE_BUS_DEAF).
 */
export const PULLS_PER_TURN = 64

/** Resolves in the event loop's next turn (its check phase), after the I/O and timers now due. */
export function nextTurn (): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

/**
 * Runs `each` over `items` in slices of `size`, one slice per turn of the event loop (setImmediate),
 * so a pass over tens of thousands of streams never holds the loop for the whole pass: I/O and
 * timers run between slices. The first slice runs at once. Returns a cancel for what is left, or
 * null when nothing is left (the pass fitted one slice and `done` has run).
 */
export function inSlices<T> (items: readonly T[], size: number, each: (item: T) => void, done: () => void = () => {}): (() => void) | null {
  let timer: NodeJS.Immediate | undefined
  const step = (from: number): void => {
    timer = undefined
    const end = Math.min(from + size, items.length)
    for (let i = from; i < end; i++) each(items[i])
    if (end < items.length) timer = setImmediate(step, end)
    else done()
  }
  step(0)
  if (timer === undefined) return null
  return () => { if (timer !== undefined) clearImmediate(timer) }
}
