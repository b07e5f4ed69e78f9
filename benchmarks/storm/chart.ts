import type { TopLevelSpec } from 'vega-lite'
import { vegaLiteSvg } from '../lib/vega-svg'
import type { StormRow } from './report'

/** Connects/s over time per server, one panel per population (log-like scale: the storm dwarfs the rest). */
export async function connectsChart (rows: StormRow[]): Promise<string> {
  const values = rows.flatMap((row) => row.timeline.map((connects, i) => ({
    server: row.server, population: row.population, second: i + 1, connects
  })))
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: 'Connects per second (server-counted) after the clients start',
    data: { values },
    facet: { field: 'population', type: 'nominal', title: null, sort: [...new Set(rows.map((r) => r.population))] },
    columns: 3,
    spec: {
      width: 240,
      height: 150,
      mark: { type: 'line', interpolate: 'step-before', strokeWidth: 1.5 },
      encoding: {
        x: { field: 'second', type: 'quantitative', title: 'seconds since the clients started', axis: { tickMinStep: 1 } },
        y: {
          field: 'connects',
          type: 'quantitative',
          title: 'connects/s (symlog)',
          scale: { type: 'symlog' },
          axis: { values: [0, 1, 10, 100, 1000, 10_000] }
        },
        color: { field: 'server', type: 'nominal', title: 'server', sort: [...new Set(rows.map((r) => r.server))] }
      }
    },
    resolve: { scale: { y: 'shared' } }
  }
  return await vegaLiteSvg(spec)
}
