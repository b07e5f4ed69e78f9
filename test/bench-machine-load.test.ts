import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { finishLoadRecord, startLoadRecord, takeForce } from '../benchmarks/lib/machine-load'

t.test('a run records the load before and after; one that starts busy keeps off the committed results unless forced', async (t) => {
  const committed = await mkdtemp(path.join(os.tmpdir(), 'machine-load-'))
  t.teardown(() => rm(committed, { recursive: true, force: true }))
  const load = (one: number) => () => [one, 0.5, 0.25]

  const quiet = startLoadRecord(committed, committed, false, load(0.9), 2)
  t.same([quiet.busy, quiet.dir, quiet.note], [false, committed, null], 'load 0.9 on 2 CPUs is quiet: the committed results')
  const busy = startLoadRecord(committed, committed, false, load(1.01), 2)
  t.same([busy.busy, busy.dir], [true, path.join(committed, 'tmp')], 'above 0.5 per CPU: results/tmp')
  t.match(busy.note, /busy machine \(load average 1\.01 on 2 CPUs.*written to .*tmp instead of the committed results \(--force/)
  const forced = startLoadRecord(committed, committed, true, load(3), 2)
  t.same([forced.busy, forced.dir], [true, committed], '--force: the committed results, still marked busy')
  t.notMatch(forced.note, /written to/)
  const elsewhere = startLoadRecord('/tmp/out', committed, false, load(3), 2)
  t.equal(elsewhere.dir, '/tmp/out', 'an --out directory is left as chosen')

  await writeFile(path.join(committed, 'x.json'), JSON.stringify({ rows: [1] }))
  await writeFile(path.join(committed, 'x.md'), '# x\n')
  const machine = finishLoadRecord(forced, 'x', () => [1.234, 1, 1])
  t.same(machine, { cpus: 2, loadBefore: [3, 0.5, 0.25], loadAfter: [1.23, 1, 1] })
  t.same(JSON.parse(await readFile(path.join(committed, 'x.json'), 'utf8')), { rows: [1], machine })
  t.match(await readFile(path.join(committed, 'x.md'), 'utf8'), /^# x\n\n## Machine\n\n2 CPUs; load average \(1 \/ 5 \/ 15 min\) 3 \/ 0\.5 \/ 0\.25 before the run, 1\.23 \/ 1 \/ 1 after\.\n\nWARNING: started on a busy machine/)

  t.same(takeForce(['--quick', '--force']), { force: true, argv: ['--quick'] })
  t.same(takeForce(['--quick']), { force: false, argv: ['--quick'] })
})
