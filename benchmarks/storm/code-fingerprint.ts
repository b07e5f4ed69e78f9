import { readdirSync, statSync } from 'node:fs'
import path from 'node:path'

/** Each module file the benchmark's processes load, with its size and modification time. */
export type CodeFingerprint = Map<string, string>

/**
 * Fingerprints lib/ and benchmarks/ as this process sees them: build/lib and build/benchmarks
 * (.js) when compiled, the sources (.ts) under tap. Child processes load these files when they
 * start, so a build that lands mid-run changes the code under the later measurements.
 */
export function codeFingerprint (): CodeFingerprint {
  const extension = path.extname(__filename)
  const fingerprint: CodeFingerprint = new Map()
  for (const dir of [path.resolve(__dirname, '..', '..', 'lib'), path.resolve(__dirname, '..')]) {
    for (const name of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
      if (!name.endsWith(extension)) continue
      const file = path.join(dir, name)
      const stat = statSync(file)
      fingerprint.set(file, `${stat.size}:${stat.mtimeMs}`)
    }
  }
  return fingerprint
}

/** Files added, removed or rewritten between two fingerprints. */
export function changedFiles (before: CodeFingerprint, after: CodeFingerprint): string[] {
  const names = new Set([...before.keys(), ...after.keys()])
  return [...names].filter((name) => before.get(name) !== after.get(name)).sort()
}
