/**
 * The client process of the resume benchmark, driven over IPC: raw-socket clients, one per answer,
 * each checking its tokens once and in order. `answers`: answers back to back in N slots at once
 * (throughput, and the memory phase). `resume`: answers paced on instance A, a sample of them cut
 * and resumed on instance B with their Last-Event-ID, timed to the first missed token.
 */
import { Histogram } from '../lib/histogram'
import { serveIpc, type IpcRequest } from '../lib/ipc'
import { addCounts, NO_COUNTS, OrderLedger, type OrderCounts } from './accounting'
import { openAnswer, type AnswerRequest } from './answer-socket'
import { ANSWER_PATH } from './plan'
import { isToken, tokenNumber, type SseFrame } from './sse-reader'

export interface AnswersReply {
  /** Answers admitted (a 200 stream), and those of them that ended with `event: end`. */
  started: number
  completed: number
  /** Answers refused before they started (not a 200 stream), not retried. */
  refused: number
  /** Reconnects with a Last-Event-ID after a stream closed before its end. */
  resumes: number
  /** Tokens received (distinct, every answer). */
  tokens: number
  counts: OrderCounts
  /** Responses other than a 200 stream, and `event: error` codes, by what they were. */
  failures: Record<string, number>
  /** First request → last answer's close. */
  elapsedMs: number
  /** This process's CPU over the phase (user + system). */
  cpuUs: number
}

export interface ResumeReply {
  /** Reconnect's request (its connect) → its first token, µs, one per resumed cut. */
  latencyUs: ReturnType<Histogram['toJSON']>
  resumed: number
  /** Cuts not made: the answer had ended, or had no id yet. */
  skipped: number
  /** Resumes whose first token was not the one after the last received before the cut. */
  firstNotNext: number
  failures: Record<string, number>
  /** Every answer of the phase, cut or not. */
  counts: OrderCounts
  /** The cut answers only. */
  cutCounts: OrderCounts
  elapsedMs: number
  cpuUs: number
}

function integer (request: IpcRequest, field: string): number {
  const value = request[field]
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new Error(`"${request.type}" needs ${field} as an integer >= 0, got ${String(value)}`)
  }
  return value
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
const cpuNow = (): number => {
  const { user, system } = process.cpuUsage()
  return user + system
}

function answerRequest (user: string, tokens: number, bytes: number, everyMs: number, lastEventId?: string): AnswerRequest {
  return {
    method: 'POST',
    path: ANSWER_PATH,
    headers: { 'x-user': user, 'x-tokens': tokens, 'x-bytes': bytes, 'x-every-ms': everyMs, ...(lastEventId === undefined ? {} : { 'last-event-id': lastEventId }) }
  }
}

function fail (failures: Record<string, number>, what: string): void {
  failures[what] = (failures[what] ?? 0) + 1
}

/** What a frame does to an answer's ledger: a token, the end, or an error (counted as a failure). */
function account (ledger: OrderLedger, frame: SseFrame, failures: Record<string, number>): void {
  if (isToken(frame)) ledger.add(tokenNumber(frame.data))
  else if (frame.event === 'end') ledger.end()
  else if (frame.event !== undefined) fail(failures, `event: ${frame.event} ${frame.data ?? ''}`)
}

/** Times a client reconnects with its Last-Event-ID when an answer's stream closes before its end. */
const MAX_RESUMES = 3

interface AnswerOutcome {
  /** null: refused (not a 200 stream) before it started. */
  ledger: OrderLedger | null
  /** Reconnects after a stream closed before its end, as tower-sse/client does. */
  resumes: number
}

/**
 * One answer read to its end (or given up after `timeoutMs`): a stream that closes before its
 * `end` is resumed with its Last-Event-ID, as tower-sse/client would; a refusal is not retried.
 */
async function oneAnswer (port: number, request: AnswerRequest, tokens: number, timeoutMs: number, failures: Record<string, number>): Promise<AnswerOutcome> {
  const ledger = new OrderLedger(tokens)
  let lastId: string | undefined
  let timedOut = false
  let resumes = 0
  const deadline = performance.now() + timeoutMs
  for (;;) {
    const asked = lastId === undefined ? request : { ...request, headers: { ...request.headers, 'last-event-id': lastId } }
    const answer = openAnswer(port, asked, (frames, reader) => {
      if (reader.status !== 200) return
      for (const frame of frames) {
        if (frame.id !== undefined) lastId = frame.id
        account(ledger, frame, failures)
      }
    })
    const timer = setTimeout(() => {
      timedOut = true
      answer.socket.destroy()
    }, Math.max(0, deadline - performance.now()))
    await answer.closed
    clearTimeout(timer)
    const { status, plain } = answer.reader
    if (status !== 200) {
      fail(failures, status === 0 ? `no response (${answer.error() ?? 'closed'})` : `HTTP ${status} ${plain.slice(0, 120)}`.trim())
      if (resumes === 0 && lastId === undefined) return { ledger: null, resumes }
      return { ledger, resumes }
    }
    if (ledger.hasEnded) return { ledger, resumes }
    if (timedOut) {
      fail(failures, `no end within ${timeoutMs} ms`)
      return { ledger, resumes }
    }
    if (lastId === undefined || resumes >= MAX_RESUMES) {
      fail(failures, 'closed before its end')
      return { ledger, resumes }
    }
    resumes++
  }
}

serveIpc('resume client', {
  /**
   * `answers` slots at once, each running answers back to back: `perSlot` of them, none started
   * after `maxMs`. Each answer's tokens are checked once and in order.
   */
  answers: async (request): Promise<AnswersReply> => {
    const port = integer(request, 'port')
    const slots = integer(request, 'answers')
    const perSlot = integer(request, 'perSlot')
    const tokens = integer(request, 'tokens')
    const bytes = integer(request, 'bytes')
    const timeoutMs = integer(request, 'timeoutMs')
    const deadline = performance.now() + integer(request, 'maxMs')
    const failures: Record<string, number> = {}
    let counts: OrderCounts = { ...NO_COUNTS }
    let started = 0
    let completed = 0
    let refused = 0
    let resumes = 0
    const cpu = cpuNow()
    const from = performance.now()
    await Promise.all(Array.from({ length: slots }, async (_, slot) => {
      for (let n = 0; n < perSlot && performance.now() < deadline; n++) {
        const { ledger, resumes: again } = await oneAnswer(port, answerRequest(`u${slot}`, tokens, bytes, 0), tokens, timeoutMs, failures)
        resumes += again
        if (ledger === null) {
          refused++
          continue
        }
        started++
        if (ledger.hasEnded) completed++
        counts = addCounts(counts, ledger.counts())
      }
    }))
    return { started, completed, refused, resumes, tokens: counts.delivered, counts, failures, elapsedMs: performance.now() - from, cpuUs: cpuNow() - cpu }
  },

  /**
   * `answers` paced answers on A; the first `cuts` of them cut one by one (every `cutEveryMs`
   * from `cutFromMs`), each reconnected on B `gapMs` after its cut with its Last-Event-ID.
   */
  resume: async (request): Promise<ResumeReply> => {
    const [portA, portB] = [integer(request, 'portA'), integer(request, 'portB')]
    const count = integer(request, 'answers')
    const tokens = integer(request, 'tokens')
    const bytes = integer(request, 'bytes')
    const everyMs = integer(request, 'everyMs')
    const cuts = Math.min(integer(request, 'cuts'), count)
    const cutFromMs = integer(request, 'cutFromMs')
    const cutEveryMs = integer(request, 'cutEveryMs')
    const gapMs = integer(request, 'gapMs')
    const timeoutMs = integer(request, 'timeoutMs')
    const failures: Record<string, number> = {}
    const latency = new Histogram()
    let resumed = 0
    let skipped = 0
    let firstNotNext = 0
    const cpu = cpuNow()
    const from = performance.now()

    interface Answer { ledger: OrderLedger, lastId: string | undefined, lastToken: number, closed: Promise<void>, cut: () => boolean }
    const answers: Answer[] = []
    for (let i = 0; i < count; i++) {
      const ledger = new OrderLedger(tokens)
      const state: Answer = { ledger, lastId: undefined, lastToken: -1, closed: Promise.resolve(), cut: () => false }
      const user = `u${i}`
      const onA = openAnswer(portA, answerRequest(user, tokens, bytes, everyMs), (frames) => {
        for (const frame of frames) {
          account(ledger, frame, failures)
          if (frame.id !== undefined) state.lastId = frame.id
          if (isToken(frame)) state.lastToken = tokenNumber(frame.data)
        }
      })
      let resumedClosed: Promise<void> | null = null
      state.closed = onA.closed.then(async () => { await resumedClosed })
      state.cut = () => {
        if (ledger.hasEnded || state.lastId === undefined) return false
        onA.socket.destroy()
        const lastId = state.lastId
        const expected = state.lastToken + 1
        resumedClosed = sleep(gapMs).then(async () => {
          const at = performance.now()
          let first = true
          const onB = openAnswer(portB, answerRequest(user, tokens, bytes, everyMs, lastId), (frames, reader) => {
            if (reader.status !== 200) return
            for (const frame of frames) {
              if (first && isToken(frame)) {
                first = false
                latency.record((performance.now() - at) * 1000)
                resumed++
                if (tokenNumber(frame.data) !== expected) firstNotNext++
              }
              account(ledger, frame, failures)
            }
          })
          await onB.closed
          if (onB.reader.status !== 200) fail(failures, `resume: HTTP ${onB.reader.status} ${onB.reader.plain.slice(0, 80)}`)
        })
        return true
      }
      answers.push(state)
      // Spread the answers' starts over 100 ms: not one burst of creates.
      if (count > 1) await sleep(100 / count)
    }

    for (let i = 0; i < cuts; i++) {
      await sleep(Math.max(0, from + cutFromMs + i * cutEveryMs - performance.now()))
      if (!answers[i].cut()) skipped++
    }
    let timedOut = false
    const limit = setTimeout(() => { timedOut = true }, tokens * everyMs + timeoutMs)
    await Promise.race([
      Promise.all(answers.map((answer) => answer.closed)),
      (async () => { while (!timedOut) await sleep(100) })()
    ])
    clearTimeout(limit)
    timedOut = true
    if (answers.some((answer) => !answer.ledger.hasEnded)) fail(failures, 'answers not ended when the phase gave up')
    const all = answers.reduce((sum, answer) => addCounts(sum, answer.ledger.counts()), { ...NO_COUNTS })
    const cut = answers.slice(0, cuts).reduce((sum, answer) => addCounts(sum, answer.ledger.counts()), { ...NO_COUNTS })
    return { latencyUs: latency.toJSON(), resumed, skipped, firstNotNext, failures, counts: all, cutCounts: cut, elapsedMs: performance.now() - from, cpuUs: cpuNow() - cpu }
  }
})
