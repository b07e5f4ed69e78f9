import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'

/**
 * Where a run writes: `outDir` if given, else the repository's benchmarks/results, or its tmp/
 * for a quick or targeted run (never over the committed results).
 */
export function resultsDir (root: string, outDir: string | null, scratch: boolean): string {
  return outDir ?? path.join(root, 'benchmarks', 'results', ...(scratch ? ['tmp'] : []))
}

/** One row of a results file's Targets table: what was aimed at, what was measured, whether it was met. */
export interface Target { target: string, measured: string, met: boolean }

/** Writes `name`.json, `name`.md and, when there is a chart, `name`.svg into `dir`. */
export function writeResults (dir: string, name: string, results: unknown, markdown: string, svg: string | null): void {
  mkdirSync(dir, { recursive: true })
  writeFileSync(path.join(dir, `${name}.json`), JSON.stringify(results, null, 2) + '\n')
  writeFileSync(path.join(dir, `${name}.md`), markdown + '\n')
  if (svg !== null) writeFileSync(path.join(dir, `${name}.svg`), svg)
}
