import type { ClientCounters } from './counters'

/** Knobs the populations share, from the storm's command line. */
export interface PopulationSettings {
  /** hammer: pause before reconnecting after any end, refusal or error, in ms. */
  hammerDelayMs: number
  /** autocannon: requests per second across all its connections. */
  stormRate: number
  /** autocannon: how long it may run at most, in seconds (its runner stops it sooner). */
  maxSeconds: number
  /**
   * autocannon: the X-Forwarded-For it sends. A server keys clients by address, so a storm that
   * must not share the other clients' per-key cap comes "through a proxy" the server trusts.
   */
  forwardedFor?: string
}

/** A running population; `close()` stops every client and cancels every pending reconnect. */
export interface Population {
  /** Settles once no client of the population will send anything more. */
  close: () => void | Promise<void>
}

/** Starts `size` clients of one kind against `url`, counting what they see in `counters`. */
export type PopulationStart = (url: string, size: number, counters: ClientCounters, settings: PopulationSettings) => Population

/** A population of `size` independent clients; `open` starts one and returns how to stop it. */
export function eachClient (size: number, open: () => () => void): Population {
  const stops = Array.from({ length: size }, open)
  return { close: () => { for (const stop of stops) stop() } }
}
