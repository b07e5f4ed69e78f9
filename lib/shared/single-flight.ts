/**
 * Concurrent callers asking for the same key share one call: a reconnect wave of clients
 * resuming from the same id costs one history read, not one per client.
 */
export class SingleFlight<T> {
  private readonly inFlight = new Map<string, Promise<T>>()

  run (key: string, call: () => Promise<T>): Promise<T> {
    const running = this.inFlight.get(key)
    if (running !== undefined) return running
    const started = call().finally(() => this.inFlight.delete(key))
    this.inFlight.set(key, started)
    return started
  }
}
