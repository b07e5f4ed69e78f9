import os from 'node:os'

/** The host and how busy it was: every figure of a run on a shared 2-core machine depends on it. */
export interface MachineLoad {
  cpus: number
  /** os.loadavg() (1, 5, 15 min) when the run began and when it ended. */
  loadBefore: number[]
  loadAfter: number[]
}

/** Reads the load now; call again with the result to fill in loadAfter. */
export function machineLoad (before?: MachineLoad): MachineLoad {
  const now = os.loadavg().map((n) => Number(n.toFixed(2)))
  return before === undefined ? { cpus: os.cpus().length, loadBefore: now, loadAfter: [] } : { ...before, loadAfter: now }
}
