import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'

export interface SiblingOptions {
  /** Arguments after the module path. */
  args?: string[]
  /** Extra Node flags (e.g. --expose-gc), after the caller's own execArgv. */
  nodeFlags?: string[]
  /** Raise the child's soft open-file limit to the hard limit first (many sockets). */
  raiseFileLimit?: boolean
  /** A command that runs the child's shell, e.g. ['unshare', '-rn'] for a private network namespace. */
  launcher?: string[]
  /** Shell commands run (inside the launcher) before Node starts; Node starts only if they succeed. */
  setup?: string
}

// Node cannot call setrlimit itself, so a shell raises the limit and then becomes node (exec),
// keeping the IPC descriptor Node handed down.
const RAISE_FILE_LIMIT = 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; '

/**
 * Starts the module `name` that sits next to `callerFile` as a Node child with an IPC channel.
 * It takes the caller's extension (.js when compiled, .ts under tap) and execArgv (the tests'
 * TypeScript loader), so the same code spawns from both layouts.
 */
export function spawnSibling (callerFile: string, name: string, options: SiblingOptions = {}): ChildProcess {
  const file = path.join(path.dirname(callerFile), name + path.extname(callerFile))
  const nodeArgs = [...process.execArgv, ...(options.nodeFlags ?? []), file, ...(options.args ?? [])]
  const stdio: Array<'ignore' | 'inherit' | 'ipc'> = ['ignore', 'inherit', 'inherit', 'ipc']
  const setup = (options.raiseFileLimit === true ? RAISE_FILE_LIMIT : '') +
    (options.setup === undefined ? '' : `${options.setup} && `)
  const launcher = options.launcher ?? []
  if (setup === '' && launcher.length === 0) return spawn(process.execPath, nodeArgs, { stdio })
  const [command, ...args] = [...launcher, '/bin/sh', '-c', `${setup}exec "$0" "$@"`, process.execPath, ...nodeArgs]
  return spawn(command, args, { stdio })
}

/** The soft limit on open files of this process (Linux /proc), or null where unknown. */
export function openFileLimit (): number | null {
  try {
    const limits = readFileSync('/proc/self/limits', 'utf8')
    const match = /^Max open files\s+(\d+|unlimited)/m.exec(limits)
    if (match === null) return null
    return match[1] === 'unlimited' ? Number.POSITIVE_INFINITY : Number(match[1])
  } catch {
    return null
  }
}
