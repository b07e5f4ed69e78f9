import os from 'node:os'
import { IpcClient } from '../ipc'
import { Histogram } from '../histogram'
import type { CollectReply, ConnectReply } from '../fanout/client'
import { nowUs } from '../fanout/payload'
import { spawnClient } from '../fanout/rig'
import { postNotify } from '../clients/notify'
import { sleep } from '../processes'
import { streamsPerInstance } from './stats'
import { TowerProcess } from './launcher'

/** What one fan-out measurement does (bench:cluster's plan.fanout holds these, besides its stream counts and rounds). */
export interface FanoutPhasePlan {
  streamsPerProcess: number
  connectConcurrency: number
  /** Unmeasured broadcasts first (JIT, first-touch allocations), then `events` measured ones. */
  warmupEvents: number
  events: number
  /** Gap between broadcasts: stream count / this many streams per ms, at least `minIntervalMs`. */
  streamsPerIntervalMs: number
  minIntervalMs: number
  deliveryTimeoutMs: number
}

export const FANOUT_PHASE: Readonly<FanoutPhasePlan> = Object.freeze({
  streamsPerProcess: 2500,
  connectConcurrency: 64,
  warmupEvents: 3,
  events: 20,
  streamsPerIntervalMs: 10,
  minIntervalMs: 200,
  deliveryTimeoutMs: 30_000
})

/** The plan measureFanout reads: the phase's settings and how long one notify POST may take. */
export interface FanoutPhaseSettings { fanout: FanoutPhasePlan, notifyTimeoutMs: number }

/** Gap between two broadcasts of the fan-out phase at `streams` total streams. */
export function fanoutIntervalMs (plan: FanoutPhaseSettings, streams: number): number {
  return Math.max(plan.fanout.minIntervalMs, Math.round(streams / plan.fanout.streamsPerIntervalMs))
}

/** The stamp sits in the notification's title, `"<µs>,<seq>"`: the fan-out client scans for it. */
export const TITLE_MARKER = '"title":"'
const REQUEST_MS = 120_000

export interface FanoutRow {
  setup: 'memory' | 'redis'
  instances: number
  /** More workers than CPUs: the row measures CPU contention as much as the bus, so it is kept apart. */
  oversubscribed?: boolean
  streams: number
  admitted: number
  /** Streams per instance as the instances reported them (largest first). */
  perInstance: number[]
  events: number
  /** Notify answers other than 200 (0 expected). */
  notifyFailures: number
  /** Deliveries received ÷ (admitted streams × events). */
  share: number
  p50Ms: number
  p99Ms: number
  maxMs: number
  /** p99 of each round, in the order measured (the row's figures are the medians over rounds). */
  p99ByRound: number[]
}

function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/** One row from a setup's rounds: median latencies, the worst share and admission. */
export function combineRounds (rounds: FanoutRow[]): FanoutRow {
  if (rounds.length === 0) throw new Error('no rounds to combine')
  return {
    ...rounds[0],
    admitted: Math.min(...rounds.map((r) => r.admitted)),
    notifyFailures: rounds.reduce((sum, r) => sum + r.notifyFailures, 0),
    share: Math.min(...rounds.map((r) => r.share)),
    p50Ms: median(rounds.map((r) => r.p50Ms)),
    p99Ms: median(rounds.map((r) => r.p99Ms)),
    maxMs: Math.max(...rounds.map((r) => r.maxMs)),
    p99ByRound: rounds.map((r) => r.p99Ms)
  }
}

export type Log = (line: string) => void

/** `streams` total raw streams held by client processes, a stamped broadcast POSTed to the port. */
export async function measureFanout (
  plan: FanoutPhaseSettings, cli: string, setup: 'memory' | 'redis', instances: number, streams: number, redisUrl: string, log: Log
): Promise<FanoutRow> {
  log(`fan-out: ${streams} streams, ${instances} instance(s), ${setup} bus`)
  const tower = await TowerProcess.start({
    cli, workers: instances, redisUrl: setup === 'redis' ? redisUrl : undefined, flags: ['--max-clients', String(streams)]
  })
  const processes = Math.ceil(streams / plan.fanout.streamsPerProcess)
  const holders = Array.from({ length: processes }, (_, i) =>
    new IpcClient(spawnClient(), `fan-out client process ${i}`))
  try {
    const share = (i: number): number => Math.floor(streams / processes) + (i < streams % processes ? 1 : 0)
    const connected = await Promise.all(holders.map((holder, i) => holder.request<ConnectReply>({
      type: 'connect',
      port: tower.port,
      path: '/api/events',
      count: share(i),
      concurrency: plan.fanout.connectConcurrency,
      localAddress: `127.0.8.${1 + i}`,
      marker: TITLE_MARKER
    }, REQUEST_MS)))
    const admitted = connected.reduce((sum, c) => sum + c.admitted, 0)
    const errors = connected.flatMap((c) => c.errors)
    if (admitted < streams) log(`  only ${admitted} of ${streams} streams admitted: ${errors.slice(0, 3).join('; ')}`)
    const perInstance = setup === 'redis' ? await streamsPerInstance(tower.port, tower.workerPids, admitted, 5000) : [admitted]
    const intervalMs = fanoutIntervalMs(plan, streams)
    let seq = 0
    let notifyFailures = 0
    const send = async (count: number): Promise<void> => {
      for (let i = 0; i < count; i++) {
        const started = Date.now()
        const outcome = await postNotify(tower.port, { type: 'bench', title: `${nowUs()},${seq++}`, body: '' }, plan.notifyTimeoutMs)
        if (outcome.kind !== 'answered' || outcome.status !== 200) notifyFailures++
        await sleep(Math.max(0, intervalMs - (Date.now() - started)))
      }
    }
    const collect = async (perStream: number): Promise<CollectReply[]> => await Promise.all(holders.map((holder) =>
      holder.request<CollectReply>({ type: 'collect', perStream, timeoutMs: plan.fanout.deliveryTimeoutMs }, REQUEST_MS)))
    await send(plan.fanout.warmupEvents)
    await collect(plan.fanout.warmupEvents)
    await Promise.all(holders.map((holder) => holder.request({ type: 'reset' }, REQUEST_MS)))
    notifyFailures = 0
    await send(plan.fanout.events)
    const replies = await collect(plan.fanout.events)
    const latency = new Histogram()
    for (const reply of replies) latency.merge(reply.latencyUs)
    const received = replies.reduce((sum, r) => sum + r.received, 0)
    const row: FanoutRow = {
      setup,
      instances,
      ...(instances > os.cpus().length ? { oversubscribed: true } : {}),
      streams,
      admitted,
      perInstance,
      events: plan.fanout.events,
      notifyFailures,
      share: admitted === 0 ? 0 : received / (admitted * plan.fanout.events),
      p50Ms: latency.quantile(0.5) / 1000,
      p99Ms: latency.quantile(0.99) / 1000,
      maxMs: latency.max / 1000,
      p99ByRound: []
    }
    log(`  admitted ${admitted} (${perInstance.join('/')}), delivered ${(row.share * 100).toFixed(2)}%, p50 ${row.p50Ms.toFixed(1)} ms, p99 ${row.p99Ms.toFixed(1)} ms`)
    return row
  } finally {
    await Promise.all(holders.map((holder) => holder.exit()))
    tower.stop()
  }
}
