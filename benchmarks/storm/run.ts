/**
 * The storm benchmark's command: every server × population side by side, the narrowed-port
 * runs and the refusal path; prints storm.md and writes it with storm.json and storm.svg.
 * `npm run bench:storm -- --help` lists the options.
 */
import path from 'node:path'
import { finishLoadRecord, startLoadRecord, takeForce } from '../lib/machine-load'
import { repoRoot } from '../lib/repo-root'
import { parsePlan, USAGE, type StormPlan } from './plan'
import { OUTPUT_FILES, runStorm } from './storm'

async function main (argv: string[]): Promise<number> {
  if (argv.includes('--help')) {
    process.stdout.write(USAGE)
    return 0
  }
  let plan: StormPlan
  const { force, argv: args } = takeForce(argv)
  try {
    plan = parsePlan(args)
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}`)
    return 2
  }
  const command = ['npm run bench:storm', ...(argv.length > 0 ? ['--', ...argv] : [])].join(' ')
  const load = startLoadRecord(plan.outDir, path.join(repoRoot(__dirname), 'benchmarks', 'results'), force)
  plan = { ...plan, outDir: load.dir }
  const { report, markdown } = await runStorm(plan, command)
  finishLoadRecord(load, 'storm')
  process.stdout.write(markdown)
  process.stdout.write(`\nWritten: ${OUTPUT_FILES.map((file) => path.join(plan.outDir, file)).join(', ')}\n`)
  return report.failures.length === 0 ? 0 : 1
}

main(process.argv.slice(2)).then((code) => { process.exitCode = code }, (error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
