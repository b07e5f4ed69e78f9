/** The answers' route on every instance (tower-sse) and on the resumable-stream server. */
export const ANSWER_PATH = '/answer'

/** Where the answers' log lives: the Redis bus (a Redis Stream per answer), or the process (the baseline). */
export const LOGS = ['redis', 'memory'] as const
export type LogKind = typeof LOGS[number]

export const PHASES = ['throughput', 'resume', 'memory', 'compare'] as const
export type Phase = typeof PHASES[number]

/** Everything one run does; every loop is bounded by these counts and times. */
export interface ResumePlan {
  name: 'full' | 'quick'
  phases: Phase[]
  /** Token data size in bytes, every phase. */
  tokenBytes: number
  /** A client waits this long for one answer's end before it gives up on it (counted incomplete). */
  answerTimeoutMs: number
  throughput: {
    /** Concurrent answers, one case each: each answer read by one raw socket of the client process. */
    answers: number[]
    /** Tokens per answer, produced as fast as the log takes them. */
    tokens: number
    /** Each case runs answers back to back in every slot until it has made about this many tokens… */
    tokensPerCase: number
    /** …or until this long has passed (no answer starts after it; those started run to their end). */
    maxMs: number
    /** Answers run (in every slot at once, up to 20) before each case's measurement: JIT, Redis's script cache. */
    warmupAnswers: number
    logs: LogKind[]
  }
  resume: {
    /** Answers in flight on instance A, each read by one raw socket. */
    answers: number
    tokens: number
    /** A token every this many ms (a timer per answer). */
    everyMs: number
    /** Connections cut (one per answer, the first `cuts` answers), one every `cutEveryMs` from `cutFromMs` after the start. */
    cuts: number
    cutFromMs: number
    cutEveryMs: number
    /** A cut connection reconnects on instance B this long after the cut (the tokens produced meanwhile are what it missed). */
    gapMs: number
  }
  memory: {
    /** Answers run to their end, `concurrency` at a time, before Redis's memory is read again. */
    answers: number
    concurrency: number
    tokens: number
  }
  compare: {
    /** The answer's tokens, one every `everyMs`; its producer holds at `killAt` and is SIGKILLed there. */
    tokens: number
    killAt: number
    everyMs: number
    /** In the `follow` scenario the client's first connection is cut at this token and resumed on the other process before the kill. */
    followAt: number
    /** How long a client waits after the kill for anything more (then: it hangs). */
    waitMs: number
  }
}

export const FULL_PLAN: Readonly<ResumePlan> = Object.freeze({
  name: 'full',
  phases: [...PHASES],
  tokenBytes: 16,
  answerTimeoutMs: 180_000,
  throughput: { answers: [1, 100, 1000], tokens: 1000, tokensPerCase: 1_000_000, maxMs: 30_000, warmupAnswers: 20, logs: [...LOGS] },
  // 100 answers × a token every 10 ms: 10,000 tokens/s in all, well under what the throughput phase
  // measures, so that the latency is the resume's and not a queue's.
  resume: { answers: 100, tokens: 1500, everyMs: 10, cuts: 100, cutFromMs: 1000, cutEveryMs: 100, gapMs: 50 },
  memory: { answers: 500, concurrency: 100, tokens: 1000 },
  compare: { tokens: 2000, killAt: 1000, everyMs: 2, followAt: 500, waitMs: 25_000 }
})

export const QUICK_PLAN: Readonly<ResumePlan> = Object.freeze({
  ...FULL_PLAN,
  name: 'quick',
  answerTimeoutMs: 20_000,
  throughput: { answers: [1, 10, 100], tokens: 200, tokensPerCase: 20_000, maxMs: 3000, warmupAnswers: 5, logs: [...LOGS] },
  resume: { answers: 20, tokens: 400, everyMs: 5, cuts: 20, cutFromMs: 300, cutEveryMs: 50, gapMs: 50 },
  memory: { answers: 50, concurrency: 10, tokens: 200 },
  compare: { ...FULL_PLAN.compare, waitMs: 12_000 }
})

export interface RunArgs {
  plan: ResumePlan
  outDir: string | null
  help: boolean
  /** A run narrower than the plan's (any filter): written to results/tmp/ unless --out says otherwise. */
  targeted: boolean
}

export const USAGE = 'usage: run [--quick] [--phases=throughput,resume,memory,compare] [--answers=1,100,1000] [--tokens=1000] ' +
  '[--token-bytes=16] [--logs=redis,memory] [--resume-answers=100] [--wait-ms=25000] [--out=DIR] [--force] [--help]'

function positiveIntegers (flag: string, text: string, max: number): number[] {
  const values = text.split(',').map(Number)
  if (values.some((n) => !Number.isSafeInteger(n) || n < 1 || n > max)) {
    throw new Error(`${flag} takes comma-separated integers 1-${max}, got "${text}"\n${USAGE}`)
  }
  return values
}

function names<T extends string> (flag: string, text: string, known: readonly T[]): T[] {
  const given = text.split(',')
  const unknown = given.find((name) => !(known as readonly string[]).includes(name))
  if (unknown !== undefined) throw new Error(`${flag}: unknown "${unknown}"; known: ${known.join(', ')}\n${USAGE}`)
  return given as T[]
}

function copy (plan: Readonly<ResumePlan>): ResumePlan {
  return {
    ...plan,
    phases: [...plan.phases],
    throughput: { ...plan.throughput, answers: [...plan.throughput.answers], logs: [...plan.throughput.logs] },
    resume: { ...plan.resume },
    memory: { ...plan.memory },
    compare: { ...plan.compare }
  }
}

/** Reads the command line; an unknown or malformed argument is an error that names it. */
export function parseArgs (argv: readonly string[]): RunArgs {
  const plan = copy(argv.includes('--quick') ? QUICK_PLAN : FULL_PLAN)
  let outDir: string | null = null
  let help = false
  let targeted = false
  for (const arg of argv) {
    const [flag, value] = arg.split(/=(.*)/s, 2)
    if (arg === '--quick') continue
    if (arg === '--help') help = true
    else if (flag === '--phases' && value !== undefined) plan.phases = names(flag, value, PHASES)
    else if (flag === '--answers' && value !== undefined) plan.throughput.answers = positiveIntegers(flag, value, 5000)
    else if (flag === '--tokens' && value !== undefined) plan.throughput.tokens = positiveIntegers(flag, value, 100_000)[0]
    else if (flag === '--token-bytes' && value !== undefined) plan.tokenBytes = positiveIntegers(flag, value, 64 * 1024)[0]
    else if (flag === '--logs' && value !== undefined) plan.throughput.logs = names(flag, value, LOGS)
    else if (flag === '--resume-answers' && value !== undefined) {
      plan.resume.answers = positiveIntegers(flag, value, 5000)[0]
      plan.resume.cuts = Math.min(plan.resume.cuts, plan.resume.answers)
    } else if (flag === '--wait-ms' && value !== undefined) plan.compare.waitMs = positiveIntegers(flag, value, 120_000)[0]
    else if (flag === '--out' && value !== undefined && value !== '') outDir = value
    else throw new Error(`unknown or malformed argument "${arg}"\n${USAGE}`)
    if (flag !== '--out' && arg !== '--help') targeted = true
  }
  return { plan, outDir, help, targeted }
}
