import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'

/**
 * Where a benchmark puts its server and its load on the CPUs: the server (Tower, its workers, its
 * redis-server) pinned to one CPU with `taskset -c`, every load-generating process to another, so
 * that what the server measures (its event-loop lag, its CPU) is its own and not the clients'.
 * Unpinned, with the reason, when taskset is missing or fewer than two CPUs are allowed.
 */
export type Pinning =
  | {
    pinned: true
    serverCpu: number
    loadCpu: number
    /** Prefixes for a command line: `taskset -c <cpu>`. */
    serverLauncher: string[]
    loadLauncher: string[]
  }
  | { pinned: false, reason: string, serverLauncher: [], loadLauncher: [] }

/** `0-1,3,5-6` (a Cpus_allowed_list) → [0, 1, 3, 5, 6]. */
export function parseCpuList (text: string): number[] {
  const cpus: number[] = []
  for (const part of text.trim().split(',')) {
    if (part === '') continue
    const match = /^(\d+)(?:-(\d+))?$/.exec(part)
    if (match === null) throw new Error(`not a CPU list: ${JSON.stringify(text)}`)
    const from = Number(match[1])
    const to = match[2] === undefined ? from : Number(match[2])
    for (let cpu = from; cpu <= to; cpu++) cpus.push(cpu)
  }
  return cpus
}

/** The server on the first CPU this process may use, the load on the second; unpinned (and why) otherwise. */
export function choosePinning (allowed: readonly number[] | null, hasTaskset: boolean): Pinning {
  const unpinned = (reason: string): Pinning => ({ pinned: false, reason, serverLauncher: [], loadLauncher: [] })
  if (!hasTaskset) return unpinned('taskset (util-linux) is not installed')
  if (allowed === null) return unpinned('the CPUs this process may use are unknown (no /proc/self/status)')
  if (allowed.length < 2) return unpinned(`only ${allowed.length} CPU is available (nproc ${allowed.length})`)
  const [serverCpu, loadCpu] = allowed
  return { pinned: true, serverCpu, loadCpu, serverLauncher: ['taskset', '-c', String(serverCpu)], loadLauncher: ['taskset', '-c', String(loadCpu)] }
}

/** The CPUs process `pid` may run on (its Cpus_allowed_list), or null where unknown. */
export function allowedCpus (pid: number | 'self' = 'self'): number[] | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const match = /^Cpus_allowed_list:\s*(\S+)/m.exec(status)
    return match === null ? null : parseCpuList(match[1])
  } catch {
    return null
  }
}

function tasksetWorks (): boolean {
  const run = spawnSync('taskset', ['--version'], { stdio: 'ignore' })
  return run.error === undefined && run.status === 0
}

/** The pinning this machine allows for a benchmark run from this process. */
export function planPinning (): Pinning {
  return choosePinning(allowedCpus(), tasksetWorks())
}

/**
 * Pins this process (every thread of it, `taskset -a -p`) to `cpu`: a runner that only samples and
 * coordinates sits with the load, not on the server's CPU. Children it starts inherit it unless
 * started with a launcher of their own.
 */
export function pinSelf (cpu: number): void {
  const run = spawnSync('taskset', ['-a', '-p', '-c', String(cpu), String(process.pid)], { stdio: 'ignore' })
  if (run.error !== undefined || run.status !== 0) throw new Error(`taskset could not pin this process to CPU ${cpu} (exit ${String(run.status)})`)
}

/** A process's allowed CPUs as /proc shows them (e.g. "0"), for the results: what the pinning actually did. */
export function affinityText (pid: number | undefined): string | null {
  const cpus = pid === undefined ? null : allowedCpus(pid)
  return cpus === null ? null : cpus.join(',')
}
