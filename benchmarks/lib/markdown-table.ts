export type Align = 'left' | 'right'

/** A GitHub markdown table; `|` in a cell is escaped so a cell can never split a row. */
export function markdownTable (headers: string[], rows: string[][], align: Align[] = []): string {
  for (const [i, row] of rows.entries()) {
    if (row.length !== headers.length) {
      throw new Error(`markdown table row ${i} has ${row.length} cells, the header has ${headers.length}`)
    }
  }
  const cell = (text: string): string => text.replaceAll('|', '\\|')
  const line = (cells: string[]): string => `| ${cells.map(cell).join(' | ')} |`
  const rule = headers.map((_, i) => align[i] === 'right' ? '---:' : '---')
  return [line(headers), `| ${rule.join(' | ')} |`, ...rows.map(line)].join('\n') + '\n'
}
