import http from 'node:http'
import { emptyPostLog, postNotify, postSequence, postSummary, recordPost, type PostLog, type PostSummary } from '../lib/clients/notify'
import { kindRows, Population, type KindRow } from '../lib/clients/population'
import { sleep } from '../lib/processes'
import type { RedisServer } from '../lib/redis-server'
import type { TowerProcess } from '../lib/tower/launcher'
import { countTimeWait } from '../lib/time-wait'
import { PopulationProcess } from '../lib/populations/process'
import type { ClientStats } from '../lib/populations/stats'
import { STORM_ADDRESS, waveStarts, type SoakPlan } from './plan'
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
  /** Sequence-accounted steady clients, per kind: lost, duplicated, out of order, resyncs. */
  kinds: KindRow[]
  /** Per storm wave: when, and what its clients counted. */
  waves: Array<{ atS: number, stoppedS: number, attempts: number, errors: Record<string, number>, failed: string | null }>
  /** Redis run: when Redis was killed and answered again, and which worker was killed when (seconds into the run). */
  incidents: Array<{ what: string, atS: number }>
}

type Log = (line: string) => void

/** Accepted events the furthest-behind accounted client has not received yet (0 before any). */
async function lagOf (seq: Population, posts: PostLog, log?: Log): Promise<number> {
  const last = posts.accepted.at(-1)
  const slowest = await seq.slowest()
  if (last === undefined || slowest === null) return 0
  const lag = Math.max(0, last - slowest.highest)
  if (lag > 0) log?.(`slowest accounted client: ${lag} events behind; ${slowest.state}`)
  return lag
}

/** Notifies for `durationMs`: `perSec` one at a time, and a burst of `burstSize` back to back every `burstEveryMs`. */
async function notifyLoop (plan: SoakPlan, port: number, posts: PostLog, agent: http.Agent): Promise<number> {
  const { perSec, burstEveryMs, burstSize, timeoutMs } = plan.notify
  const end = Date.now() + plan.durationMs
  let seq = 1
  while (Date.now() < end) {
    seq = await postSequence(port, seq, perSec, Math.min(burstEveryMs, end - Date.now()), timeoutMs, posts, agent)
    for (let i = 0; i < burstSize && Date.now() < end; i++, seq++) {
      recordPost(posts, seq, await postNotify(port, { type: 'bench', title: String(seq), body: '' }, timeoutMs, agent))
    }
  }
  return seq
}

/** A wave's process is started this long before its wave, so its own start-up is not on the wave's clock. */
const WAVE_LEAD_MS = 15_000

/** One storm wave at `at` ms into the run: autocannon at the seed's rate from its own key, stopped after the wave's duration. */
async function stormWave (plan: SoakPlan, url: string, runStart: number, at: number, label: string): Promise<ClientStats> {
  const { storm } = plan
  await sleep(runStart + at - WAVE_LEAD_MS - Date.now())
  const wave = new PopulationProcess('autocannon', storm.connections, { stormRate: storm.perSec, maxSeconds: Math.ceil(storm.durationMs / 1000) + 5, hammerDelayMs: 50, forwardedFor: STORM_ADDRESS }, label)
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
 */
export async function runSoakTraffic (plan: SoakPlan, tower: TowerProcess, redis: RedisServer | null, log: Log): Promise<SoakTraffic> {
  const base = `http://127.0.0.1:${tower.port}/api/events?clientId=`
  let runStart = Date.now()
  const { steady } = plan
  const seq = Population.spawn(steady.seqClients, steady.seqPerProcess, steady.seqEventSources)
  const posts = emptyPostLog()
  const sample = async (): Promise<Sample> => ({
    t: (Date.now() - runStart) / 1000,
    ...readMetrics(await fetchMetrics(tower.port, SCRAPE_TIMEOUT_MS)),
    logLines: tower.logLines,
    clientTimeWait: countTimeWait(tower.port).client,
    clientLagEvents: await lagOf(seq, posts, log)
  })
  const fdsBaseline = (await sample()).openFds
  const groups = steady.groups.map((g) => ({ group: g, process: new PopulationProcess(g.population, g.size, { stormRate: 0, maxSeconds: 0, hammerDelayMs: 0 }, `steady ${g.population}`) }))
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  try {
    const opened = await seq.open(base + 'seq', CONNECT_TIMEOUT_MS)
    for (const { group, process } of groups) await process.start(base + group.population)
    log(`steady: ${opened.client.open}/${opened.client.count} tower-sse/client + ${opened.eventsource.open}/${opened.eventsource.count} EventSource accounted, ${steady.groups.map((g) => `${g.size} ${g.population}`).join(', ')}`)
    await seq.mark()
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
    const posting = notifyLoop(plan, tower.port, posts, agent)
    // A wave that fails (its process too slow to start on a loaded host) is reported, not fatal to the run.
    const waves = waveStarts(plan).map(async (at, i) => {
      const label = `storm wave ${i + 1}`
      const counted = await stormWave(plan, base + 'storm', runStart, at, label).catch((error: Error) => {
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
    const nextSeq = await posting
    const [waveRows] = await Promise.all([Promise.all(waves), chaos])
    for (const incident of incidents) log(`${incident.what} at ${incident.atS.toFixed(1)} s`)
    const durationS = (Date.now() - runStart) / 1000
    // Clients behind on a busy machine still have events on their way: accounting before they
    // arrive would call them lost. Bounded: a client that never catches up is reported as it is.
    const drainEnd = Date.now() + plan.drainMs
    while (Date.now() < drainEnd && await lagOf(seq, posts) > 0) await sleep(500)
    const drainS = (Date.now() - runStart) / 1000 - durationS
    sampling = false
    await sampler
    samples.push(await sample())
    const phase = await seq.phase(posts, 1, nextSeq - 1)
    log(`published ${posts.accepted.length} of ${nextSeq - 1} posted; ${samples.length} samples`)
    // The clients leave; Tower's files must come back to where they were before any came.
    await seq.exit()
    for (const { process } of groups) {
      await process.stop()
      await process.exit()
    }
    agent.destroy()
    const settleEnd = Date.now() + plan.settleMs
    let fdsAfter = Number.NaN
    for (;;) {
      fdsAfter = readMetrics(await fetchMetrics(tower.port, SCRAPE_TIMEOUT_MS)).openFds
      if (Math.abs(fdsAfter - fdsBaseline) <= 10 || Date.now() >= settleEnd) break
      await sleep(500)
    }
    return { durationS, drainS, fdsBaseline, fdsAfter, samples, posts: postSummary(posts), kinds: kindRows(phase), waves: waveRows, incidents }
  } finally {
    agent.destroy()
    await seq.exit()
    await Promise.all(groups.map(({ process }) => process.exit()))
  }
}
