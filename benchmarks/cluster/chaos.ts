import { emptyPostLog, postSequence, postSummary, type PostSummary } from '../lib/clients/notify'
import type { ClusterPlan } from './plan'
import { kindRows, type KindRow, type Population } from '../lib/clients/population'
import type { RedisServer } from '../lib/redis-server'
import { sleep } from '../lib/processes'
import type { TowerProcess } from '../lib/tower/launcher'
import type { ClientKind } from '../lib/clients/seq-client'

export interface WaveRow {
  wave: number
  /** Seconds from the phase's start to the kill. */
  atS: number
  killedPid: number
  /** Kill → the replacement worker's "listening" line. */
  replacedInMs: number | null
  /** Client reconnects (opens after the first) in this wave's window, and the last one's delay after the kill. */
  reconnects: number
  lastReconnectS: number | null
  windowS: number
  xrange: number
  xread: number
  /** XREAD calls beyond the quiet baseline's rate over the same time (the steady readers' own loop). */
  xreadExcess: number
}

export interface ChaosResult {
  instances: number
  clients: Record<ClientKind, number>
  durationS: number
  broadcastsPerSec: number
  posts: PostSummary
  kinds: KindRow[]
  baseline: { windowS: number, xread: number, xrange: number }
  waves: WaveRow[]
}

const diff = (after: Record<string, number>, before: Record<string, number>, command: string): number =>
  (after[command] ?? 0) - (before[command] ?? 0)

/**
 * 20 broadcasts/s to the cluster's port while a worker is SIGKILLed every `killEveryMs`; Redis
 * command counts are read before each kill, so each wave's window runs from its kill to the next.
 */
export async function runChaos (
  plan: ClusterPlan, tower: TowerProcess, population: Population, redis: RedisServer, clients: Record<ClientKind, number>,
  firstSeq: number, log: (line: string) => void
): Promise<{ result: ChaosResult, nextSeq: number }> {
  const { chaos } = plan
  await population.mark()
  const posts = emptyPostLog()
  const start = Date.now()
  const snapshots = [{ at: start, calls: await redis.commandCalls() }]
  const posting = postSequence(tower.port, firstSeq, chaos.broadcastsPerSec, chaos.durationMs, plan.notifyTimeoutMs, posts)
  const kills: Array<{ at: number, pid: number, before: Set<number> }> = []
  for (let k = 1; k * chaos.killEveryMs < chaos.durationMs; k++) {
    await sleep(start + k * chaos.killEveryMs - Date.now())
    snapshots.push({ at: Date.now(), calls: await redis.commandCalls() })
    const before = new Set(tower.workerPids)
    const pid = [...before][0]
    if (pid === undefined) throw new Error('no live worker to kill')
    kills.push({ at: Date.now(), pid, before })
    tower.killWorker(pid)
    log(`chaos: killed worker ${pid} at ${((Date.now() - start) / 1000).toFixed(1)} s`)
  }
  const nextSeq = await posting
  snapshots.push({ at: Date.now(), calls: await redis.commandCalls() })
  await sleep(chaos.drainMs)
  const phase = await population.phase(posts, firstSeq, nextSeq - 1)
  const reopens = [...phase.client.reopens, ...phase.eventsource.reopens].sort((a, b) => a - b)
  const baselineMs = snapshots[1].at - snapshots[0].at
  const baselineXread = diff(snapshots[1].calls, snapshots[0].calls, 'xread')
  const waves = kills.map((kill, i): WaveRow => {
    const from = snapshots[i + 1]
    const to = snapshots[i + 2]
    const windowMs = to.at - from.at
    const inWindow = reopens.filter((t) => t >= kill.at && t < (kills[i + 1]?.at ?? Number.POSITIVE_INFINITY))
    const replacement = [...tower.listeningAt].filter(([pid, at]) => !kill.before.has(pid) && at >= kill.at).map(([, at]) => at)
    const xread = diff(to.calls, from.calls, 'xread')
    return {
      wave: i + 1,
      atS: (kill.at - start) / 1000,
      killedPid: kill.pid,
      replacedInMs: replacement.length === 0 ? null : Math.min(...replacement) - kill.at,
      reconnects: inWindow.length,
      lastReconnectS: inWindow.length === 0 ? null : (inWindow[inWindow.length - 1] - kill.at) / 1000,
      windowS: windowMs / 1000,
      xrange: diff(to.calls, from.calls, 'xrange'),
      xread,
      xreadExcess: Math.max(0, Math.round(xread - baselineXread * windowMs / baselineMs))
    }
  })
  return {
    nextSeq,
    result: {
      instances: plan.workers,
      clients,
      durationS: chaos.durationMs / 1000,
      broadcastsPerSec: chaos.broadcastsPerSec,
      posts: postSummary(posts),
      kinds: kindRows(phase),
      baseline: { windowS: baselineMs / 1000, xread: baselineXread, xrange: diff(snapshots[1].calls, snapshots[0].calls, 'xrange') },
      waves
    }
  }
}
