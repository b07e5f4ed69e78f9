/**
 * The soak's poster, in a process of its own so that it can be pinned with the other load
 * generators (plan.ts, run.ts): notifies on the plan's schedule with up to `inFlight` of them out
 * at once on kept-alive connections (post-window.ts), every answer filed as the other benches file
 * theirs (lib/clients/notify). The runner asks how far it got while it runs and takes its log at
 * the end.
 */
import http from 'node:http'
import { emptyPostLog, postNotify, type PostLog } from '../lib/clients/notify'
import { serveIpc } from '../lib/ipc'
import { postWindowed, type NotifyPlan, type PosterStats } from './post-window'

/** What the runner takes at the end: the log as the clients' accounting reads it, and how the poster kept up. */
export interface PosterResult {
  accepted: number[]
  unknown: number[]
  refused: PostLog['refused']
  stats: PosterStats
}

/** While it runs: the highest sequence number accepted so far (the clients' lag is measured against it). */
export interface PosterStatus { highestAccepted: number | null, posted: number, accepted: number }

const log = emptyPostLog()
let highestAccepted: number | null = null
let running: Promise<PosterStats> | null = null
let agent: http.Agent | null = null

serveIpc('soak poster', {
  /** Starts posting (and answers at once): `notify` is the plan's, for `durationMs`, from sequence number 1. */
  start: (request) => {
    if (running !== null) throw new Error('the poster is already running')
    const notify = request.notify as NotifyPlan
    const port = Number(request.port)
    const durationMs = Number(request.durationMs)
    // One kept-alive connection per notify in flight.
    agent = new http.Agent({ keepAlive: true, maxSockets: notify.inFlight })
    const own = agent
    running = postWindowed(async (seq) => {
      const outcome = await postNotify(port, { type: 'bench', title: String(seq), body: '' }, notify.timeoutMs, own)
      if (outcome.kind === 'answered' && outcome.status === 200 && (highestAccepted === null || seq > highestAccepted)) highestAccepted = seq
      return outcome
    }, notify, durationMs, 1, log)
    return null
  },

  status: (): PosterStatus => ({ highestAccepted, posted: log.accepted.length + log.refused.length + log.unknown.length, accepted: log.accepted.length }),

  /** Resolves once the run's posting is over: the log and the poster's own figures. */
  finish: async (): Promise<PosterResult> => {
    if (running === null) throw new Error('the poster was not started')
    const stats = await running
    agent?.destroy()
    return { accepted: log.accepted, unknown: log.unknown, refused: log.refused, stats }
  }
})
