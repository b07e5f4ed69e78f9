import { postSummary, type PostLog, type PostSummary } from '../lib/clients/notify'
import { kindRows, Population, type KindRow } from '../lib/clients/population'
import { affinityText, type Pinning } from '../lib/cpu-affinity'
import { CHILD_REQUEST_TIMEOUT_MS, IpcClient } from '../lib/ipc'
import { sleep } from '../lib/processes'
import { spawnSibling } from '../lib/spawn-sibling'
import type { RedisServer } from '../lib/redis-server'
import type { TowerProcess } from '../lib/tower/launcher'
import { countTimeWait } from '../lib/time-wait'
import { PopulationProcess } from '../lib/populations/process'
import type { ClientStats } from '../lib/populations/stats'
import { STORM_ADDRESS, waveStarts, type SoakPlan } from './plan'
import type { PosterStats } from './post-window'
import type { PosterResult, PosterStatus } from './poster'
import { fetchMetrics, readMetrics, type Sample } from './samples'

const CONNECT_TIMEOUT_MS = 60_000
const SCRAPE_TIMEOUT_MS = 5000

/** What the soak's traffic did and what it saw, before it is judged (report.ts). */
export interface SoakTraffic {
  durationS: number
  /** From the last notify until every accounted client had every accepted event (at most plan.drainMs). */
  drainS: number
  /** Open files before any client came, and the last reading after they all left (within settleMs). */
  fdsBaseline: number
  fdsAfter: number
  samples: Sample[]
  posts: PostSummary
  /** How the poster kept up with its schedule (its in-flight limit, the most out, how far behind). */
  poster: PosterStats
  /** Where the processes ran: pinned (server and load CPUs, and the CPUs /proc shows Tower and the poster were allowed) or not, and why. */
  pinning: PinningRecord
  /** Sequence-accounted steady clients, per kind: lost, duplicated, out of order, resyncs. */
  kinds: KindRow[]
  /** Per storm wave: when, and what its clients counted. */
  waves: Array<{ atS: number, stoppedS: number, attempts: number, errors: Record<string, number>, failed: string | null }>
  /** Redis run: when Redis was killed and answered again, and which worker was killed when (seconds into the run). */
  incidents: Array<{ what: string, atS: number }>
}

export interface PinningRecord {
  pinned: boolean
  /** Pinned: the CPU of Tower (its workers and, on Redis, its redis-server) and that of every load generator and the runner. */
  serverCpu: number | null
  loadCpu: number | null
  /** Unpinned: why (taskset missing, one CPU). */
  reason: string | null
  /** The CPUs /proc says Tower and the poster were allowed (what the pinning actually did). */
  towerCpus: string | null
  posterCpus: string | null
}

export function pinningRecord (pinning: Pinning, towerPid: number | undefined, posterPid: number | undefined): PinningRecord {
  return {
    pinned: pinning.pinned,
    serverCpu: pinning.pinned ? pinning.serverCpu : null,
    loadCpu: pinning.pinned ? pinning.loadCpu : null,
    reason: pinning.pinned ? null : pinning.reason,
    towerCpus: affinityText(towerPid),
    posterCpus: affinityText(posterPid)
  }
}

type Log = (line: string) => void

/** The poster in its own process (poster.ts), pinned with the load. */
class PosterProcess {
  readonly ipc: IpcClient

  constructor (launcher: string[]) {
    this.ipc = new IpcClient(spawnSibling(__filename, 'poster', { launcher }), 'soak poster')
  }

  async start (port: number, plan: SoakPlan): Promise<void> {
    await this.ipc.request({ type: 'start', port, notify: plan.notify, durationMs: plan.durationMs }, CHILD_REQUEST_TIMEOUT_MS)
  }

  async status (): Promise<PosterStatus> {
    return await this.ipc.request<PosterStatus>({ type: 'status' }, CHILD_REQUEST_TIMEOUT_MS)
  }

  /** Waits for the run's posting to end (its last POSTs answered or timed out). */
  async finish (plan: SoakPlan): Promise<PosterResult> {
    return await this.ipc.request<PosterResult>({ type: 'finish' }, plan.durationMs + plan.notify.timeoutMs + 60_000)
  }
}

/** Accepted events the furthest-behind accounted client has not received yet (0 before any). */
async function lagOf (seq: Population, highestAccepted: number | null, log?: Log): Promise<number> {
  const slowest = await seq.slowest()
  if (highestAccepted === null || slowest === null) return 0
  const lag = Math.max(0, highestAccepted - slowest.highest)
  if (lag > 0) log?.(`slowest accounted client: ${lag} events behind; ${slowest.state}`)
  return lag
}

/** A wave's process is started this long before its wave, so its own start-up is not on the wave's clock. */
const WAVE_LEAD_MS = 15_000

/** One storm wave at `at` ms into the run: autocannon at the seed's rate from its own key, stopped after the wave's duration. */
async function stormWave (plan: SoakPlan, url: string, runStart: number, at: number, label: string, launcher: string[]): Promise<ClientStats> {
  const { storm } = plan
  await sleep(runStart + at - WAVE_LEAD_MS - Date.now())
  const wave = new PopulationProcess('autocannon', storm.connections, { stormRate: storm.perSec, maxSeconds: Math.ceil(storm.durationMs / 1000) + 5, hammerDelayMs: 50, forwardedFor: STORM_ADDRESS }, label, launcher)
  try {
    await sleep(runStart + at - Date.now())
    await wave.start(url)
    await sleep(storm.durationMs)
    const counted = await wave.stats()
    await wave.stop()
    return counted
  } finally {
    await wave.exit()
  }
}

/**
 * The seed's traffic, compressed: steady clients (churned by a short max age), storm waves, a
 * steady notify rate with bursts, and on Redis a restart and a worker kill; /metrics sampled all
 * along. Every loop ends with the run's duration; the clients leave before the last readings.
 * Every load-generating process (the accounted clients, the steady populations, the storm waves,
 * the poster) starts under `pinning.loadLauncher`.
 */
export async function runSoakTraffic (plan: SoakPlan, tower: TowerProcess, redis: RedisServer | null, log: Log, pinning: Pinning): Promise<SoakTraffic> {
  const base = `http://127.0.0.1:${tower.port}/api/events?clientId=`
  const launcher = pinning.loadLauncher
  let runStart = Date.now()
  const { steady } = plan
  const seq = Population.spawn(steady.seqClients, steady.seqPerProcess, steady.seqEventSources, launcher)
  const poster = new PosterProcess(launcher)
  let highestAccepted: number | null = null
  const sample = async (): Promise<Sample> => {
    const metrics = readMetrics(await fetchMetrics(tower.port, SCRAPE_TIMEOUT_MS))
    highestAccepted = (await poster.status()).highestAccepted
    return {
      t: (Date.now() - runStart) / 1000,
      ...metrics,
      logLines: tower.logLines,
      clientTimeWait: countTimeWait(tower.port).client,
      clientLagEvents: await lagOf(seq, highestAccepted, log)
    }
  }
  const fdsBaseline = (await sample()).openFds
  const groups = steady.groups.map((g) => ({ group: g, process: new PopulationProcess(g.population, g.size, { stormRate: 0, maxSeconds: 0, hammerDelayMs: 0 }, `steady ${g.population}`, launcher) }))
  try {
    const opened = await seq.open(base + 'seq', CONNECT_TIMEOUT_MS)
    for (const { group, process } of groups) await process.start(base + group.population)
    log(`steady: ${opened.client.open}/${opened.client.count} tower-sse/client + ${opened.eventsource.open}/${opened.eventsource.count} EventSource accounted, ${steady.groups.map((g) => `${g.size} ${g.population}`).join(', ')}`)
    await seq.mark()
    // A scrape as the run begins: prom-client's loop-lag histogram restarts at every scrape, so the
    // first sample's window is the run's first 10 s, not the clients' start-up.
    await fetchMetrics(tower.port, SCRAPE_TIMEOUT_MS)
    runStart = Date.now()
    const samples: Sample[] = []
    let sampling = true
    const sampler = (async () => {
      for (let n = 1; sampling; n++) {
        await sleep(runStart + n * plan.sampleEveryMs - Date.now())
        if (!sampling) break
        const s = await sample().catch((error: Error) => { log(`sample at ${((Date.now() - runStart) / 1000).toFixed(0)} s failed: ${error.message}`); return null })
        if (s !== null) samples.push(s)
      }
    })()
    await poster.start(tower.port, plan)
    const pinned = pinningRecord(pinning, tower.pid, poster.ipc.child.pid)
    // A wave that fails (its process too slow to start on a loaded host) is reported, not fatal to the run.
    const waves = waveStarts(plan).map(async (at, i) => {
      const label = `storm wave ${i + 1}`
      const counted = await stormWave(plan, base + 'storm', runStart, at, label, launcher).catch((error: Error) => {
        log(`${label} failed: ${error.message}`)
        return error
      })
      const stoppedS = (Date.now() - runStart) / 1000
      if (counted instanceof Error) return { atS: at / 1000, stoppedS, attempts: 0, errors: {}, failed: counted.message }
      return { atS: at / 1000, stoppedS, attempts: counted.attempts, errors: counted.errors, failed: null }
    })
    const incidents: SoakTraffic['incidents'] = []
    const chaos = redis === null
      ? Promise.resolve()
      : (async () => {
          await sleep(runStart + plan.incidents.restartRedisAt * plan.durationMs - Date.now())
          incidents.push({ what: 'Redis SIGKILLed', atS: (Date.now() - runStart) / 1000 })
          await redis.kill()
          await sleep(plan.incidents.outageMs)
          await redis.start()
          incidents.push({ what: 'Redis answering again (empty)', atS: (Date.now() - runStart) / 1000 })
          await sleep(runStart + plan.incidents.killWorkerAt * plan.durationMs - Date.now())
          const victim = [...tower.workerPids][0]
          if (victim === undefined) throw new Error('no live worker to kill')
          tower.killWorker(victim)
          incidents.push({ what: `worker ${victim} SIGKILLed`, atS: (Date.now() - runStart) / 1000 })
        })()
    const posted = await poster.finish(plan)
    const posts: PostLog = { accepted: posted.accepted, refused: posted.refused, unknown: posted.unknown, acceptedAt: new Map() }
    highestAccepted = posted.accepted.reduce((a, b) => Math.max(a, b), 0)
    const nextSeq = posted.stats.nextSeq
    log(`poster: ${nextSeq - 1} posted, at most ${posted.stats.maxInFlight} in flight (limit ${posted.stats.inFlightLimit}), at most ${posted.stats.maxBehind} behind its schedule, ${posted.stats.behindAtEnd} never sent`)
    const [waveRows] = await Promise.all([Promise.all(waves), chaos])
    for (const incident of incidents) log(`${incident.what} at ${incident.atS.toFixed(1)} s`)
    const durationS = (Date.now() - runStart) / 1000
    // Clients behind on a busy machine still have events on their way: accounting before they
    // arrive would call them lost. Bounded: a client that never catches up is reported as it is.
    const drainEnd = Date.now() + plan.drainMs
    while (Date.now() < drainEnd && await lagOf(seq, highestAccepted) > 0) await sleep(500)
    const drainS = (Date.now() - runStart) / 1000 - durationS
    sampling = false
    await sampler
    samples.push(await sample())
    // Up to inFlight notifies were out together: only numbers that far apart must arrive in order.
    const phase = await seq.phase(posts, 1, nextSeq - 1, plan.notify.inFlight)
    log(`published ${posts.accepted.length} of ${nextSeq - 1} posted; ${samples.length} samples`)
    // The clients leave; Tower's files must come back to where they were before any came.
    await seq.exit()
    for (const { process } of groups) {
      await process.stop()
      await process.exit()
    }
    await poster.ipc.exit()
    const settleEnd = Date.now() + plan.settleMs
    let fdsAfter = Number.NaN
    for (;;) {
      fdsAfter = readMetrics(await fetchMetrics(tower.port, SCRAPE_TIMEOUT_MS)).openFds
      if (Math.abs(fdsAfter - fdsBaseline) <= 10 || Date.now() >= settleEnd) break
      await sleep(500)
    }
    return { durationS, drainS, fdsBaseline, fdsAfter, samples, posts: postSummary(posts), poster: posted.stats, pinning: pinned, kinds: kindRows(phase), waves: waveRows, incidents }
  } finally {
    await poster.ipc.exit()
    await seq.exit()
    await Promise.all(groups.map(({ process }) => process.exit()))
  }
}
