import { existsSync } from 'node:fs'
import path from 'node:path'
import { createInterface } from 'node:readline'
import type { ChildProcess } from 'node:child_process'
import { freePort } from '../free-port'
import type { LoadRecord } from '../machine-load'
import { startBenchRun, type BenchArgs } from '../bench-run'
import { repoRoot } from '../repo-root'
import { killGroup, spawnGroup, waitFor } from '../processes'

const START_TIMEOUT_MS = 30_000

export interface TowerStart {
  /** Compiled Tower CLI (build/lib/tower/cli.js). */
  cli: string
  workers: number
  /** Without it: one process on the memory bus. */
  redisUrl?: string
  /** Plugin options as flags, e.g. ['--max-clients', '12000']. */
  flags: string[]
  /** A command Tower runs under, e.g. ['taskset', '-c', '0'] (it execs Node: the pid stays Tower's). */
  launcher?: string[]
}

/** One line of Tower's output: who said it, when (epoch ms) and what. */
interface TowerLine { pid: number, time: number, msg: string }

function parseLine (line: string, primaryPid: number): TowerLine | null {
  if (line.startsWith('{')) {
    try {
      const record = JSON.parse(line) as { pid?: number, time?: number, msg?: string }
      if (typeof record.msg !== 'string') return null
      return { pid: record.pid ?? primaryPid, time: record.time ?? Date.now(), msg: record.msg }
    } catch {
      return null
    }
  }
  return { pid: primaryPid, time: Date.now(), msg: line }
}

/** Tower prints one summary per log interval: a long soak keeps every line well under this. */
const LOG_KEPT = 5000

/**
 * Tower as `npm start` runs it (the compiled CLI), one process or a node:cluster primary with
 * workers; what it prints tells which workers live and when each one's Redis bus came back.
 */
export class TowerProcess {
  readonly workerPids = new Set<number>()
  /** Pids that printed their "listening" line, and when (epoch ms). */
  readonly listening = new Set<number>()
  readonly listeningAt = new Map<number, number>()
  /** Per worker pid, when it logged "Redis bus is up again" (epoch ms, the worker's own clock reading). */
  readonly busUpAt = new Map<number, number[]>()
  readonly busDownAt = new Map<number, number[]>()
  /** Lines Tower has printed so far (every process of it): the soak's log-volume figure. */
  logLines = 0
  /** The first LOG_KEPT of those lines, as printed: what the soak's log-volume figure counted. */
  readonly log: string[] = []
  /** The last line Tower wrote to stderr. */
  lastError = ''
  private readonly child: ChildProcess

  private constructor (readonly port: number, options: TowerStart) {
    const args = [options.cli, '--host', '127.0.0.1', '--port', String(port), '--workers', String(options.workers), ...options.flags]
    if (options.redisUrl !== undefined) args.push('--redis', options.redisUrl)
    const [command, ...prefix] = [...(options.launcher ?? []), process.execPath]
    this.child = spawnGroup(command, [...prefix, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    // Passed through as before, the last line kept: a Tower that exits at start says why in it.
    createInterface({ input: this.child.stderr as NodeJS.ReadableStream }).on('line', (text) => {
      process.stderr.write(text + '\n')
      this.lastError = text
    })
    const primary = this.child.pid as number
    if (options.workers === 1) this.workerPids.add(primary)
    const lines = createInterface({ input: this.child.stdout as NodeJS.ReadableStream })
    lines.on('line', (text) => {
      this.logLines++
      if (this.log.length < LOG_KEPT) this.log.push(text)
      const line = parseLine(text, primary)
      if (line !== null) this.onLine(line)
    })
  }

  private onLine ({ pid, time, msg }: TowerLine): void {
    const started = /^tower: worker (\d+) started/.exec(msg)
    if (started !== null) this.workerPids.add(Number(started[1]))
    const died = /^tower: worker (\d+) died/.exec(msg)
    if (died !== null) {
      this.workerPids.delete(Number(died[1]))
      this.listening.delete(Number(died[1]))
    }
    if (msg.startsWith('tower: listening on')) {
      this.listening.add(pid)
      this.listeningAt.set(pid, time)
    }
    if (msg.includes('Redis bus is up again')) this.busUpAt.set(pid, [...(this.busUpAt.get(pid) ?? []), time])
    if (msg.includes('Redis bus is down')) this.busDownAt.set(pid, [...(this.busDownAt.get(pid) ?? []), time])
  }

  /** On a free port, or on `port` (a Tower started again where its clients reconnect). */
  static async start (options: TowerStart, port?: number): Promise<TowerProcess> {
    const tower = new TowerProcess(port ?? await freePort(), options)
    let exited = false
    tower.child.once('exit', () => { exited = true })
    await waitFor(`Tower (${options.workers} worker(s)) to listen`, () => {
      if (exited) throw new Error(`Tower exited at start: ${tower.lastError}`)
      return tower.ready(options.workers)
    }, START_TIMEOUT_MS)
    return tower
  }

  /** The pid of Tower's process (the cluster's primary). */
  get pid (): number {
    return this.child.pid as number
  }

  /** Every one of `workers` live workers is listening. */
  ready (workers: number): boolean {
    return this.workerPids.size === workers && [...this.workerPids].every((pid) => this.listening.has(pid))
  }

  /** SIGKILL to one worker (never the primary); the primary replaces it. */
  killWorker (pid: number): void {
    if (pid === this.child.pid) throw new Error('refusing to kill the cluster primary')
    process.kill(pid, 'SIGKILL')
  }

  stop (): void {
    killGroup(this.child.pid as number)
  }

  /** SIGTERM as Ctrl-C would (Tower ends its streams and logs its stop line), SIGKILL after `graceMs`. */
  async shutdown (graceMs: number): Promise<void> {
    const child = this.child
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
      child.kill('SIGTERM')
      const timer = setTimeout(() => this.stop(), graceMs)
      await exited
      clearTimeout(timer)
    }
    this.stop()
  }
}

export function towerCli (root: string): string {
  return path.join(root, 'build', 'lib', 'tower', 'cli.js')
}

/** The repository root above `fromDir` and its compiled Tower CLI, which must have been built. */
export function builtTowerCli (fromDir: string): { root: string, cli: string } {
  const root = repoRoot(fromDir)
  const cli = towerCli(root)
  if (!existsSync(cli)) throw new Error(`${cli} is missing: run npm run bench:build first`)
  return { root, cli }
}

/**
 * A Tower benchmark's start (see startBenchRun): null for --help; otherwise the plan, the built
 * CLI and the load record.
 */
export function towerBench<Plan extends { name: string }> (
  argv: readonly string[], parse: (argv: string[]) => BenchArgs<Plan>, usage: string, fromDir: string
): { plan: Plan, cli: string, load: LoadRecord } | null {
  const run = startBenchRun(argv, parse, usage, fromDir)
  if (run === null) return null
  return { plan: run.args.plan, cli: builtTowerCli(fromDir).cli, load: run.load }
}
