import type { ResumableLog } from './log'

/**
 * The plugin's log, lent to the package's other entries (tower-sse/mcp) through its hub and never
 * through the public API.
 *
 * Why this seam: an MCP event store must write to the very log the plugin created (memory, or the
 * Redis one on the bus's connection and key, with its secret and its channel), yet the log is not
 * something an app should reach, call or depend on. So nothing is added to `fastify.sse` (no
 * property, not even a symbol-keyed one that `Object.getOwnPropertySymbols` would show, so its shape
 * and the README's description of it stay exact): the plugin records its hub here, in a WeakMap of
 * this internal module, and the entry that needs the log imports this module by path. An app
 * cannot import it — the package's `exports` map names no internal path — and the WeakMap lets a
 * closed app's hub and log be collected.
 */
export interface SharedLog {
  readonly log: ResumableLog
  /** Aborted when the plugin starts closing (preClose): whoever follows the log stops. */
  readonly closing: AbortSignal
}

const shared = new WeakMap<object, SharedLog>()

/** Lends `log` under `hub`; the function returned marks it closing. */
export function shareLog (hub: object, log: ResumableLog): () => void {
  const closing = new AbortController()
  shared.set(hub, { log, closing: closing.signal })
  return () => closing.abort()
}

/** The log lent under `hub`, or undefined when the hub is none of a registered tower-sse's. */
export function sharedLogOf (hub: object): SharedLog | undefined {
  return shared.get(hub)
}
