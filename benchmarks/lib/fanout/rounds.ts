export function median (values: number[]): number {
  if (values.length === 0) throw new RangeError('median of no values')
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/**
 * One row from the rounds of the same case: the median of every figure, so one round disturbed
 * by something else on the host does not decide it; delivery keeps its worst round.
 */
export function combineRounds<Row extends { deliveredPct: number }> (rounds: Row[]): Row {
  const [first] = rounds
  if (first === undefined) throw new RangeError('no rounds to combine')
  const combined: Record<string, unknown> = { ...first }
  for (const [field, value] of Object.entries(first)) {
    if (typeof value !== 'number' || field === 'clients') continue
    const values = rounds.map((round) => round[field as keyof Row] as number)
    combined[field] = field === 'deliveredPct' ? Math.min(...values) : median(values)
  }
  return combined as Row
}
