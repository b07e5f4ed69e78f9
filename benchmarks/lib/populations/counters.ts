import type { ClientStats } from './stats'

/** What one population's clients have seen, counted in the population's process. */
export class ClientCounters {
  private attempts = 0
  private opened = 0
  private refused = 0
  private gaveUp = 0
  private readonly errors: Record<string, number> = {}

  attempt (): void {
    this.attempts++
  }

  response (status: number): void {
    if (status === 200) this.opened++
    else this.refused++
  }

  failure (error: unknown): void {
    const code = errorCode(error)
    this.errors[code] = (this.errors[code] ?? 0) + 1
  }

  gaveUpForGood (): void {
    this.gaveUp++
  }

  snapshot (): ClientStats {
    const { attempts, opened, refused, gaveUp } = this
    return { at: Date.now(), attempts, opened, refused, gaveUp, errors: { ...this.errors } }
  }
}

/**
 * The system error code behind a failure (EADDRNOTAVAIL, ECONNRESET, …). fetch wraps it as the
 * `cause` of a TypeError, so the cause chain is searched; the error's name is the fallback.
 */
export function errorCode (error: unknown): string {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as NodeJS.ErrnoException).code
    if (typeof code === 'string') return code
  }
  return error instanceof Error ? error.name : 'non-error'
}

function isAbort (error: unknown): boolean {
  return error instanceof Error && error.name === 'AbortError'
}

/** The global fetch, counting each call as an attempt and its status or failure; aborts are ours, not counted. */
export function countingFetch (counters: ClientCounters): typeof fetch {
  return async (input, init) => {
    counters.attempt()
    try {
      const response = await fetch(input, init)
      counters.response(response.status)
      return response
    } catch (error) {
      if (!isAbort(error)) counters.failure(error)
      throw error
    }
  }
}
