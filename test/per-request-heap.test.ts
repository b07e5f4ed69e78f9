import t from 'tap'
import { execFile } from 'node:child_process'
import path from 'node:path'
import { promisify } from 'node:util'

// Nothing of an ended stream stays reachable from an await still pending in the app's iterable:
// 1,500 streams of each shape, each over an iterable that never yields again (an app's generator
// waiting on a long-lived emitter, an iterator object, a Readable over a pooled cursor), each
// closed by its client. Run in a process of its own, with --expose-gc (test/fixtures/heap-cycles.ts).

const CYCLES = 1500
/**
 * What each cycle may leave on the heap: the app's own pending iterable (a suspended generator and
 * its listener on the emitter, ~3 KB). A stream's ServerResponse, socket and writer retained would
 * be ~21 KB a cycle.
 */
const BOUND_BYTES_PER_CYCLE = 8 * 1024

const root = path.join(__dirname, '..')

for (const shape of ['generator', 'iterator', 'readable']) {
  t.test(`${shape}: ${CYCLES} streams opened and left, none of their responses reachable, the heap within ${BOUND_BYTES_PER_CYCLE} bytes a cycle`, async (t) => {
    const { stdout } = await promisify(execFile)(process.execPath,
      ['--expose-gc', '--import', path.join(root, 'scripts', 'typescript-hooks.mjs'), path.join(__dirname, 'fixtures', 'heap-cycles.ts'), shape, String(CYCLES)],
      { cwd: root, timeout: 25_000 })
    const result = JSON.parse(stdout) as { alive: number, heapBytesPerCycle: number, open: number, pooled: number }
    t.equal(result.alive, 0, 'no ended stream\'s ServerResponse is reachable')
    t.equal(result.open, 0, 'every stream closed')
    t.equal(result.pooled, 0, 'every Readable destroyed (its cursor back in the pool)')
    t.ok(result.heapBytesPerCycle < BOUND_BYTES_PER_CYCLE, `${Math.round(result.heapBytesPerCycle)} bytes a cycle`)
  })
}
