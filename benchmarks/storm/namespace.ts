import { spawnSync } from 'node:child_process'
import { IpcClient } from '../lib/ipc'
import { spawnSibling } from '../lib/spawn-sibling'
import type { ScenarioResult, ScenarioSpec } from './scenario'

/** The ephemeral ports left to clients in the narrowed runs (~1,000), so exhaustion shows in seconds. */
export const NARROWED_PORTS = '40000 40999'

// A private network namespace starts with `lo` down and the default port range. Linux's default
// tcp_tw_reuse=2 lets loopback connects take over TIME_WAIT ports older than 1 s; 0 makes the
// ports behave as they do for clients on any other interface, where that default does not apply.
const NARROW = [
  'ip link set lo up',
  `echo "${NARROWED_PORTS}" > /proc/sys/net/ipv4/ip_local_port_range`,
  'echo 0 > /proc/sys/net/ipv4/tcp_tw_reuse'
].join(' && ')
const LAUNCHER = ['unshare', '-rn']
const RUN_TIMEOUT_MS = 5 * 60_000

/** Why narrowed runs cannot happen here (unshare refused, no `ip`, …), or null when they can. */
export function narrowedRunProblem (): string | null {
  const probe = spawnSync(LAUNCHER[0], [...LAUNCHER.slice(1), '/bin/sh', '-c', NARROW], { encoding: 'utf8', timeout: 10_000 })
  if (probe.error !== undefined) return `${LAUNCHER.join(' ')} failed: ${probe.error.message}`
  if (probe.status !== 0) return `${LAUNCHER.join(' ')} + narrowing the port range failed (exit ${probe.status}): ${probe.stderr.trim()}`
  return null
}

/** Runs one scenario in a fresh namespace that has only `lo`, the narrowed port range and no TIME_WAIT reuse. */
export async function runNarrowed (spec: ScenarioSpec): Promise<ScenarioResult> {
  const child = spawnSibling(__filename, 'scenario-main', { launcher: LAUNCHER, setup: NARROW })
  const runner = new IpcClient(child, `narrowed ${spec.server.name} × ${spec.population}`)
  try {
    return await runner.request<ScenarioResult>({ type: 'run', spec }, RUN_TIMEOUT_MS)
  } finally {
    await runner.exit()
  }
}
