import { startLoadRecord, takeForce, type LoadRecord } from './machine-load'
import { repoRoot } from './repo-root'
import { resultsDir } from './results-files'

/** What every benchmark's argument parser answers, beside its own options. */
export interface BenchArgs<Plan extends { name: string }> {
  plan: Plan
  outDir: string | null
  help: boolean
  /** A run of some phases or cases only: its results are not the committed ones. */
  targeted: boolean
}

/**
 * A benchmark's start: prints `usage` and returns null for --help; otherwise its parsed arguments,
 * the repository root and the load record, which says where results go (results/tmp/ for a quick
 * or targeted run, or one started on a busy machine without --force).
 */
export function startBenchRun<Plan extends { name: string }, Args extends BenchArgs<Plan>> (
  argv: readonly string[], parse: (argv: string[]) => Args, usage: string, fromDir: string
): { args: Args, root: string, load: LoadRecord } | null {
  const { force, argv: rest } = takeForce(argv)
  const args = parse(rest)
  if (args.help) {
    process.stdout.write(usage.endsWith('\n') ? usage : `${usage}\n`)
    return null
  }
  const root = repoRoot(fromDir)
  const dir = resultsDir(root, args.outDir, args.plan.name === 'quick' || args.targeted)
  return { args, root, load: startLoadRecord(dir, resultsDir(root, null, false), force) }
}
