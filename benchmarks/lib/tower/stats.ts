import http from 'node:http'

/** What this benchmark reads of GET /api/events/stats. */
export interface TowerStatsView {
  current: number
  bus: { kind: string, state: string, reads: number }
  instances?: Array<{ pid: number, current: number, rejected: number, bus: string }>
}

/** GET /api/events/stats on a new connection (so node:cluster picks the next worker). */
export function readStats (port: number, timeoutMs = 3000): Promise<TowerStatsView> {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path: '/api/events/stats', agent: false, timeout: timeoutMs }, (response) => {
      let text = ''
      response.setEncoding('utf8')
      response.on('data', (chunk: string) => { text += chunk })
      response.once('end', () => {
        try {
          resolve(JSON.parse(text) as TowerStatsView)
        } catch (error) {
          reject(new Error(`stats: not JSON (status ${response.statusCode}): ${String(error)}`))
        }
      })
    })
    request.once('timeout', () => request.destroy(new Error(`stats: no answer within ${timeoutMs} ms`)))
    request.once('error', reject)
  })
}

/**
 * Streams per worker as the cluster reports them (each instance reports once a second through
 * Redis, where a Tower killed a moment ago may still be listed: only `pids` count), retried until
 * every one of them is listed with `total` streams between them (reports lag by up to a second)
 * or `timeoutMs` passes.
 */
export async function streamsPerInstance (port: number, pids: ReadonlySet<number>, total: number, timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs
  let best: number[] = []
  while (Date.now() < deadline) {
    const stats = await readStats(port)
    const counts = (stats.instances ?? []).filter((i) => pids.has(i.pid)).map((i) => i.current).sort((a, b) => b - a)
    if (counts.length >= pids.size && counts.reduce((sum, n) => sum + n, 0) === total) return counts
    if (counts.length >= best.length) best = counts
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  return best
}
