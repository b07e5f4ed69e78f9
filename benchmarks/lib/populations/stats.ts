/** A client population's counters since it started, as it answers `stats`. */
export interface ClientStats {
  at: number
  /** Connection attempts (each a new request). */
  attempts: number
  /** Attempts answered 200. */
  opened: number
  /** Attempts answered with any other status. */
  refused: number
  /** Clients that stopped reconnecting for good (EventSource after a non-200). */
  gaveUp: number
  /** Failed attempts by error code (EADDRNOTAVAIL, ECONNRESET, …). */
  errors: Record<string, number>
}
