import { existsSync } from 'node:fs'
import path from 'node:path'

/**
 * The repository root seen from a benchmark module: the nearest folder above `fromDir` holding
 * package.json. The same answer from benchmarks/x (ts under tap) and build/benchmarks/x (compiled).
 */
export function repoRoot (fromDir: string): string {
  let dir = path.resolve(fromDir)
  while (!existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir)
    if (parent === dir) throw new Error(`no package.json in ${fromDir} or any folder above it`)
    dir = parent
  }
  return dir
}
