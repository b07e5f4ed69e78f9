import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process'
import net from 'node:net'

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

/** A port free on 127.0.0.1 right now (the OS picks it; the caller binds it at once). */
export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** Resolves when `check` is true, polling every `everyMs`; rejects with `what` after `timeoutMs`. */
export async function waitFor (what: string, check: () => boolean | Promise<boolean>, timeoutMs: number, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await check()) return
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(everyMs)
  }
}
