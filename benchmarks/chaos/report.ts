import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import type { TopLevelSpec } from 'vega-lite'
import { markdownTable } from '../lib/markdown-table'
import { vegaLiteSvg } from '../lib/vega-svg'
import { judge, TARGETS, type ChaosRow, type Verdict } from './judge'
import type { ChaosPlan } from './plan'

export interface ChaosResults {
  plan: ChaosPlan
  finishedAt: string
  durationS: number
  machine: { cpus: number, loadBefore: number[], loadAfter: number[], description: string }
  rows: Array<ChaosRow & { verdicts: Verdict[] }>
  /** Setups the bus refused at start, as it must (nothing published, so nothing to lose), with Tower's line. */
  refused: string[]
  /** Faults whose row could not be measured, with why. */
  failures: string[]
}

const ms = (n: number | null): string => n === null ? '–' : String(Math.round(n))
const load = (l: number[]): string => l.map((n) => n.toFixed(2)).join(' / ')

export function chaosMarkdown (results: ChaosResults): string {
  const { machine } = results
  const table = markdownTable(
    ['fault', 'rate/s', 'acked', 'acked then lost silently', 'resyncs per client (max / mean)', 'late deliveries', 'notify p99 / max ms', 'healthy streams dropped (+ closed deaf)', 'publishing again after ms', 'bus state seen (left up / up again after ms)', 'targets'],
    results.rows.map((r) => [
      r.title, String(r.perSec), String(r.acknowledged), String(r.lostSilently), `${r.resyncs.max} / ${r.resyncs.mean.toFixed(2)}`, String(r.late),
      `${ms(r.notifyDuringFault.p99Ms)} / ${ms(r.notifyDuringFault.maxMs)}`, r.deafens ? `${r.streamsDropped} (+ ${r.deafClosed})` : String(r.streamsDropped), ms(r.publishAgainMs),
      `${r.bus.states.join(' → ')} (${ms(r.bus.leftUpAfterMs)} / ${ms(r.bus.upAgainAfterMs)})`,
      r.verdicts.every((v) => v.met) ? 'met' : `NOT met: ${r.verdicts.filter((v) => !v.met).map((v) => `${v.target} (${v.value})`).join('; ')}`
    ]),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'left', 'left']
  )
  const failed = results.rows.reduce((n, r) => n + r.verdicts.filter((v) => !v.met).length, 0)
  return [
    `# bench:chaos (${results.plan.name} run)`,
    '',
    `${results.finishedAt}, ${results.durationS.toFixed(0)} s. ${machine.description}`,
    `Load average (1 / 5 / 15 min) before: ${load(machine.loadBefore)}, after: ${load(machine.loadAfter)}; ${machine.cpus} CPUs.`,
    '',
    `Each row: a fresh Redis (or a primary, a replica and 3 sentinels), two Tower instances on it (for the relay's faults, the first through a fault relay) with ${results.rows[0]?.clients ?? '?'} tower-sse/client clients each, notifies to the first at the rate shown; every client counts what it received by sequence number. Targets: acknowledged-then-lost silently 0, late 0, healthy streams dropped 0, notify answered within ${TARGETS.notifyMaxMs} ms, bus not up within ${TARGETS.busLeavesUpWithinMs} ms of a stall, resyncs ≤ 1 per client where data is lost or the first instance is deaf and 0 elsewhere, publishing again within ${TARGETS.failoverPublishAgainMs} ms after a failover; a deaf instance says so within ${TARGETS.deafDetectedWithinMs} ms and is up again within ${TARGETS.upAgainWithinMs} ms of the heal (its streams, told and closed with a retry meanwhile, are not healthy streams dropped).`,
    '',
    table,
    `Targets NOT met: ${failed} (of ${results.rows.reduce((n, r) => n + r.verdicts.length, 0)} judged).`,
    ...results.rows.filter((r) => r.clientsAway > 0).map((r) => `${r.title}: ${r.clientsAway} client(s) were still away 30 s after the fault; their missing events count as lost.`),
    ...(results.refused.length === 0 ? [] : ['', 'Refused at start, as the bus must (no publish is accepted, so none can be lost):', ...results.refused.map((f) => `- ${f}`)]),
    ...(results.failures.length === 0 ? [] : ['', 'Rows not measured:', ...results.failures.map((f) => `- ${f}`)]),
    ''
  ].join('\n')
}

function chartSpec (results: ChaosResults): TopLevelSpec {
  const values = results.rows.flatMap((r) => [
    { fault: r.title, what: 'notify max ms', value: r.notifyDuringFault.maxMs ?? 0 },
    { fault: r.title, what: 'notify p99 ms', value: r.notifyDuringFault.p99Ms ?? 0 }
  ])
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: `bench:chaos: notify answer time during each fault (target ≤ ${TARGETS.notifyMaxMs} ms)`,
    width: 520,
    layer: [
      {
        data: { values },
        mark: 'bar',
        encoding: {
          y: { field: 'fault', type: 'nominal', sort: null, title: null },
          yOffset: { field: 'what' },
          x: { field: 'value', type: 'quantitative', title: 'ms' },
          color: { field: 'what', type: 'nominal', title: null }
        }
      },
      { data: { values: [{ target: TARGETS.notifyMaxMs }] }, mark: { type: 'rule', strokeDash: [4, 4] }, encoding: { x: { field: 'target', type: 'quantitative' } } }
    ]
  }
}

export async function writeChaosReport (dir: string, results: ChaosResults): Promise<string> {
  mkdirSync(dir, { recursive: true })
  const md = chaosMarkdown(results)
  writeFileSync(path.join(dir, 'chaos.json'), JSON.stringify(results, null, 2) + '\n')
  writeFileSync(path.join(dir, 'chaos.md'), md)
  writeFileSync(path.join(dir, 'chaos.svg'), await vegaLiteSvg(chartSpec(results)))
  return md
}

export function withVerdicts (row: ChaosRow): ChaosRow & { verdicts: Verdict[] } {
  return { ...row, verdicts: judge(row) }
}
