/**
 * The same answer through tower-sse (the Redis bus) and through Vercel's `resumable-stream`, each
 * on two processes (P and Q) sharing one Redis: the producer on P holds at token `killAt` and P is
 * SIGKILLed there; the client resumes on Q. Two scenarios: `reconnect` (the client was reading P,
 * its connection dies with it, it reconnects to Q at once with its position) and `follow` (the
 * client had already moved to Q at token `followAt`, following P's answer from there when P dies).
 * What the client gets after the kill, whether it is told, and whether its response ends.
 */
import { IpcClient } from '../lib/ipc'
import { spawnSibling } from '../lib/spawn-sibling'
import { OrderLedger } from './accounting'
import { openAnswer, type AnswerRequest, type AnswerSocket } from './answer-socket'
import { ANSWER_PATH, type ResumePlan } from './plan'
import { isToken, tokenNumber, type SseFrame } from './sse-reader'

export const LIBRARIES = ['tower-sse', 'resumable-stream'] as const
export type CompareLibrary = typeof LIBRARIES[number]
export const SCENARIOS = ['reconnect', 'follow'] as const
export type CompareScenario = typeof SCENARIOS[number]

export interface CompareRow {
  library: CompareLibrary
  scenario: CompareScenario
  /** The answer's tokens, and the token its producer held at when P was SIGKILLed. */
  tokens: number
  killAt: number
  /** Distinct tokens the client had when the kill was sent, and those it received after. */
  beforeKill: number
  afterKill: number
  total: number
  duplicates: number
  outOfOrder: number
  /** What the client was told after the kill (an SSE event, an HTTP status), or null: nothing. */
  told: string | null
  toldAfterMs: number | null
  /** `ended`: the server closed the response; `hung`: still open, nothing more, when the wait ran out. */
  outcome: 'ended' | 'hung'
  endedAfterMs: number | null
  waitMs: number
  /** Factory runs on P (before the kill) and on Q (after): the answer is produced once. */
  producedP: number
  producedQ: number
  /** Errors the resuming process's route caught (resumable-stream's rejections), in order. */
  serverErrors: string[]
}

export type Log = (line: string) => void

const START_MS = 30_000
const REQUEST_MS = 15_000
let runs = 0

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

async function until (what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`compare: timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(5)
  }
}

/** Where a client is in the answer: the id of its last event (tower-sse) and the characters it has of the body (resumable-stream). */
interface Position { lastId: string | undefined, offset: number }

function requestFor (library: CompareLibrary, plan: ResumePlan, answerId: string, position: Position | null): AnswerRequest {
  const { tokens, everyMs, killAt } = plan.compare
  if (library === 'tower-sse') {
    return {
      method: 'POST',
      path: ANSWER_PATH,
      headers: {
        'x-user': 'alice',
        'x-tokens': tokens,
        'x-bytes': plan.tokenBytes,
        'x-every-ms': everyMs,
        'x-hold-at': killAt,
        ...(position?.lastId === undefined ? {} : { 'last-event-id': position.lastId })
      }
    }
  }
  const resumeAt = position === null ? '' : `&resumeAt=${position.offset}`
  return { method: 'GET', path: `${ANSWER_PATH}/${answerId}?tokens=${tokens}&bytes=${plan.tokenBytes}&everyMs=${everyMs}&holdAt=${killAt}${resumeAt}`, headers: {} }
}

/** One library × scenario, in fresh processes on a flushed Redis. */
export async function compareRun (redisUrl: string, flush: () => Promise<void>, plan: ResumePlan, library: CompareLibrary, scenario: CompareScenario, log: Log): Promise<CompareRow> {
  const { tokens, killAt, followAt, waitMs, everyMs } = plan.compare
  await flush()
  const module = library === 'tower-sse' ? 'instance' : 'resumable-stream-server'
  const [p, q] = ['P', 'Q'].map((name) => new IpcClient(spawnSibling(__filename, module), `${library} ${name}`))
  const sockets: AnswerSocket[] = []
  try {
    const key = `compare-${process.pid}-${++runs}`
    const [portP, portQ] = await Promise.all([p, q].map(async (server) =>
      (await server.request<{ port: number }>({ type: 'start', redis: redisUrl, key, ttlMs: 600_000 }, START_MS)).port))
    const answerId = `answer-${process.pid}-${runs}`
    const ledger = new OrderLedger(tokens)
    const position: Position = { lastId: undefined, offset: 0 }
    let killedAt: number | null = null
    let told: string | null = null
    let toldAt: number | null = null
    const tell = (what: string): void => {
      if (killedAt === null || told !== null) return
      told = what
      toldAt = performance.now()
    }
    const open = (port: number, resumed: boolean): AnswerSocket => {
      const base = position.offset
      const socket = openAnswer(port, requestFor(library, plan, answerId, resumed ? position : null), (frames: SseFrame[], reader) => {
        if (reader.status !== 200) {
          if (reader.done) tell(`HTTP ${reader.status} ${reader.plain.trim()}`.trim())
          return
        }
        for (const frame of frames) {
          if (frame.id !== undefined) position.lastId = frame.id
          if (isToken(frame)) ledger.add(tokenNumber(frame.data))
          else if (frame.event === 'end') {
            ledger.end()
            tell(`event: end ${frame.data ?? ''}`)
          } else if (frame.event !== undefined) tell(`event: ${frame.event} ${frame.data ?? ''}`)
        }
        position.offset = base + reader.consumed
      })
      sockets.push(socket)
      return socket
    }

    const first = open(portP, false)
    let second: AnswerSocket | null = null
    const holdMs = tokens * everyMs + 30_000
    if (scenario === 'follow') {
      await until(`${followAt} tokens on P`, () => ledger.received >= followAt, holdMs)
      first.socket.destroy()
      second = open(portQ, true)
    }
    await p.request({ type: 'held', count: 1 }, holdMs)
    const producedP = await p.request<number>({ type: 'produced' }, REQUEST_MS)
    const beforeKill = ledger.received
    killedAt = performance.now()
    p.child.kill('SIGKILL')
    const deadline = killedAt + waitMs
    if (second === null) {
      await Promise.race([first.closed, sleep(waitMs)])
      if (performance.now() < deadline) second = open(portQ, true)
    }
    let endedAt: number | null = null
    if (second !== null) {
      const resumed = second
      await Promise.race([resumed.closed.then(() => { endedAt = performance.now() }), sleep(Math.max(0, deadline - performance.now()))])
      if (resumed.reader.status !== 200 && resumed.reader.status !== 0) tell(`HTTP ${resumed.reader.status} ${resumed.reader.plain.trim()}`.trim())
    }
    const producedQ = await q.request<number>({ type: 'produced' }, REQUEST_MS)
    const serverErrors = library === 'resumable-stream' ? await q.request<string[]>({ type: 'errors' }, REQUEST_MS) : []
    const counts = ledger.counts()
    const since = (at: number | null): number | null => at === null || killedAt === null ? null : Math.round(at - killedAt)
    const row: CompareRow = {
      library,
      scenario,
      tokens,
      killAt,
      beforeKill,
      afterKill: ledger.received - beforeKill,
      total: ledger.received,
      duplicates: counts.duplicates,
      outOfOrder: counts.outOfOrder,
      told,
      toldAfterMs: since(toldAt),
      outcome: endedAt === null ? 'hung' : 'ended',
      endedAfterMs: since(endedAt),
      waitMs,
      producedP,
      producedQ,
      serverErrors
    }
    log(`${library}, ${scenario}: ${row.beforeKill} tokens before the kill, ${row.afterKill} after; told: ${row.told ?? 'nothing'}${row.toldAfterMs === null ? '' : ` (+${row.toldAfterMs} ms)`}; ${row.outcome}${row.endedAfterMs === null ? ` (waited ${waitMs} ms)` : ` (+${row.endedAfterMs} ms)`}`)
    return row
  } finally {
    for (const socket of sockets) socket.socket.destroy()
    await Promise.all([p, q].map(async (server) => {
      await server.request({ type: 'close' }, REQUEST_MS).catch(() => {})
      await server.exit()
    }))
  }
}

/** Both libraries, both scenarios, one after another. */
export async function runCompare (redisUrl: string, flush: () => Promise<void>, plan: ResumePlan, log: Log): Promise<CompareRow[]> {
  const rows: CompareRow[] = []
  for (const scenario of SCENARIOS) {
    for (const library of LIBRARIES) rows.push(await compareRun(redisUrl, flush, plan, library, scenario, log))
  }
  return rows
}
