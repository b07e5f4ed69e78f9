import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process'

/**
 * Every process group this run started (redis-server, Tower and its workers): killed at the end,
 * on error, and on exit, so nothing outlives the run.
 */
const groups = new Set<number>()

/** Spawns a command as the leader of its own process group (a cluster's workers join it). */
export function spawnGroup (command: string, args: string[], options: SpawnOptions = {}): ChildProcess {
  const child = spawn(command, args, { ...options, detached: true })
  const pid = child.pid
  if (pid === undefined) throw new Error(`could not start ${command}`)
  // Listed until killed, even after the leader exits: its group may still hold workers.
  groups.add(pid)
  return child
}

/** SIGKILLs the group led by `pid` (no-op if already gone). */
export function killGroup (pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL')
  } catch {
    // ESRCH: nothing left in it.
  }
  groups.delete(pid)
}

export function killAllGroups (): void {
  for (const pid of [...groups]) killGroup(pid)
}

process.once('exit', killAllGroups)
// Ctrl-C or a kill of the runner: 'exit' handlers do not run on a signal's default action.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    killAllGroups()
    process.exit(130)
  })
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

// Shared with the test fixtures (which must not install this module's signal handlers).
export { waitFor } from './wait-for'
