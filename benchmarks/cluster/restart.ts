import { emptyPostLog, postSequence, postSummary, type PostSummary } from '../lib/clients/notify'
import type { ClusterPlan } from './plan'
import { kindRows, type KindRow, type Population } from '../lib/clients/population'
import type { RedisServer } from '../lib/redis-server'
import { sleep } from '../lib/processes'
import type { TowerProcess } from '../lib/tower/launcher'

export interface RestartResult {
  instances: number
  broadcastsPerSec: number
  /** Redis killed (SIGKILL, no persistence) this long after broadcasting began; down for outageMs. */
  killAtS: number
  outageMs: number
  /** A worker SIGKILLed halfway through the outage: its clients come back with ids of the lost stream. */
  workerKilled: { pid: number, atOutageMs: number } | null
  posts: PostSummary
  /** Answers to the POSTs made while Redis was down (kill → answering PING again), by status and Retry-After. */
  duringOutage: Array<{ status: number, retryAfter: string | null, count: number }>
  acceptedDuringOutage: number
  /** Accepted (200) sequence numbers that some client never received: the target is 0. */
  acceptedThenLost: number[]
  kinds: KindRow[]
  /**
   * Per live worker, ms from Redis answering again to its "Redis bus is up again" line, or, for the
   * replacement started during the outage, to its "listening" line (it listens once its bus is up).
   */
  readAgainMs: Array<{ pid: number, ms: number | null, via: 'bus up again' | 'started listening' | 'not seen' }>
  /** The first broadcast accepted after Redis came back: when it was answered and when the last client got it. */
  firstAfter: { seq: number, acceptedAfterMs: number, clients: number, ofClients: number, lastDeliveryAfterMs: number } | null
}

/** Broadcasts at a steady rate while Redis is SIGKILLed and started again, empty, on the same port. */
export async function runRestart (
  plan: ClusterPlan, tower: TowerProcess, population: Population, redis: RedisServer, firstSeq: number, log: (line: string) => void
): Promise<{ result: RestartResult, nextSeq: number }> {
  const { restart } = plan
  await population.mark()
  const posts = emptyPostLog()
  const totalMs = restart.beforeMs + restart.outageMs + restart.afterMs
  const start = Date.now()
  const posting = postSequence(tower.port, firstSeq, restart.broadcastsPerSec, totalMs, plan.notifyTimeoutMs, posts)
  await sleep(start + restart.beforeMs - Date.now())
  const killAt = Date.now()
  await redis.kill()
  log(`restart: Redis killed at ${((killAt - start) / 1000).toFixed(1)} s`)
  await sleep(killAt + restart.outageMs / 2 - Date.now())
  const victim = [...tower.workerPids][0]
  let workerKilled: RestartResult['workerKilled'] = null
  if (victim !== undefined) {
    tower.killWorker(victim)
    workerKilled = { pid: victim, atOutageMs: Date.now() - killAt }
    log(`restart: killed worker ${victim} while Redis is down`)
  }
  await sleep(killAt + restart.outageMs - Date.now())
  await redis.start()
  const backAt = Date.now()
  log(`restart: Redis answering again after ${backAt - killAt} ms`)
  const nextSeq = await posting
  await sleep(restart.drainMs)
  const phase = await population.phase(posts, firstSeq, nextSeq - 1)
  const outage = new Map<string, { status: number, retryAfter: string | null, count: number }>()
  for (const r of posts.refused) {
    if (r.at < killAt || r.at > backAt) continue
    const key = `${r.status} ${r.retryAfter ?? ''}`
    const entry = outage.get(key) ?? { status: r.status, retryAfter: r.retryAfter, count: 0 }
    entry.count++
    outage.set(key, entry)
  }
  const acceptedDuringOutage = [...posts.acceptedAt.values()].filter((at) => at > killAt && at < backAt).length
  const kinds = kindRows(phase)
  const ofClients = kinds.reduce((sum, k) => sum + k.clients, 0)
  const first = posts.accepted.find((seq) => (posts.acceptedAt.get(seq) ?? 0) >= backAt)
  let firstAfter: RestartResult['firstAfter'] = null
  if (first !== undefined) {
    const arrival = await population.arrival(first)
    firstAfter = {
      seq: first,
      acceptedAfterMs: (posts.acceptedAt.get(first) as number) - backAt,
      clients: arrival.clients,
      ofClients,
      lastDeliveryAfterMs: arrival.lastMs - backAt
    }
  }
  return {
    nextSeq,
    result: {
      instances: plan.workers,
      broadcastsPerSec: restart.broadcastsPerSec,
      killAtS: (killAt - start) / 1000,
      outageMs: backAt - killAt,
      workerKilled,
      posts: postSummary(posts),
      duringOutage: [...outage.values()],
      acceptedDuringOutage,
      acceptedThenLost: [...new Set([...phase.client.lostSeqs, ...phase.eventsource.lostSeqs])].sort((a, b) => a - b),
      kinds,
      readAgainMs: [...tower.workerPids].map((pid) => {
        const up = (tower.busUpAt.get(pid) ?? []).find((at) => at >= killAt)
        if (up !== undefined) return { pid, ms: up - backAt, via: 'bus up again' as const }
        const listening = tower.listeningAt.get(pid)
        if (listening !== undefined && listening >= killAt) return { pid, ms: listening - backAt, via: 'started listening' as const }
        return { pid, ms: null, via: 'not seen' as const }
      }),
      firstAfter
    }
  }
}
