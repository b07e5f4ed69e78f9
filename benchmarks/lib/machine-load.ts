import { appendFileSync, readFileSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

/** A 1-minute load average above this share of the CPUs means other work was running: the figures measure contention too. */
export const BUSY_LOAD_PER_CPU = 0.5

/** What a result file records about the machine it was measured on. */
export interface MachineLoad {
  cpus: number
  /** os.loadavg() (1, 5, 15 minutes) when the run started and when it ended. */
  loadBefore: number[]
  loadAfter: number[] | null
}

export interface LoadRecord {
  machine: MachineLoad
  /** Whether the run started on a busy machine (1-minute load > BUSY_LOAD_PER_CPU × cpus). */
  busy: boolean
  /** Where the run writes: the committed results, or results/tmp/ when busy and not forced. */
  dir: string
  /** One line for the report, or null on a quiet machine. */
  note: string | null
}

const rounded = (load: number[]): number[] => load.map((n) => Number(n.toFixed(2)))

/** `--force` taken out of a benchmark's arguments (its own parser never sees it). */
export function takeForce (argv: readonly string[]): { force: boolean, argv: string[] } {
  return { force: argv.includes('--force'), argv: argv.filter((arg) => arg !== '--force') }
}

/**
 * Call before a run: records the load and decides where results go. A run that starts busy does
 * not overwrite the committed results (`committedDir`) unless forced; it writes to tmp/ beside them.
 */
export function startLoadRecord (dir: string, committedDir: string, force: boolean, loadavg = os.loadavg, cpuCount = os.cpus().length): LoadRecord {
  const machine: MachineLoad = { cpus: cpuCount, loadBefore: rounded(loadavg()), loadAfter: null }
  const busy = machine.loadBefore[0] > BUSY_LOAD_PER_CPU * machine.cpus
  const committed = path.resolve(dir) === path.resolve(committedDir)
  let note: string | null = null
  let out = dir
  if (busy) {
    note = `WARNING: started on a busy machine (load average ${machine.loadBefore[0]} on ${machine.cpus} CPUs, above ${BUSY_LOAD_PER_CPU} per CPU): other work shares the CPUs, figures are not comparable`
    if (committed && !force) {
      out = path.join(committedDir, 'tmp')
      note += `; written to ${out} instead of the committed results (--force to overwrite them)`
    }
  }
  return { machine, busy, dir: out, note }
}

/** Call when a run has ended: fills in the load after it, and repeats the busy warning on stderr. */
export function endLoadRecord (record: LoadRecord, loadavg = os.loadavg): MachineLoad {
  record.machine.loadAfter = rounded(loadavg())
  if (record.note !== null) process.stderr.write(`${record.note}\n`)
  return record.machine
}

/** Call after a run has written `<name>.json` and `<name>.md` in record.dir: adds the machine's load to both. */
export function finishLoadRecord (record: LoadRecord, name: string, loadavg = os.loadavg): MachineLoad {
  endLoadRecord(record, loadavg)
  writeLoadRecord(record, name)
  return record.machine
}

/** Adds a recorded load to `<name>.json` and `<name>.md` in record.dir (also when a report is redrawn from its JSON). */
export function writeLoadRecord (record: LoadRecord, name: string): void {
  const json = path.join(record.dir, `${name}.json`)
  const results = JSON.parse(readFileSync(json, 'utf8')) as Record<string, unknown>
  writeFileSync(json, JSON.stringify({ ...results, machine: record.machine }, null, 2) + '\n')
  appendFileSync(path.join(record.dir, `${name}.md`), machineMarkdown(record))
}

export function machineMarkdown ({ machine, note }: LoadRecord): string {
  const load = (values: number[] | null): string => values === null ? 'not recorded' : values.join(' / ')
  return `\n## Machine\n\n${machine.cpus} CPUs; load average (1 / 5 / 15 min) ${load(machine.loadBefore)} before the run, ${load(machine.loadAfter)} after.\n` +
    (note === null ? '' : `\n${note}.\n`)
}
