/**
 * `npm run bench:bus [-- --quick]`: what the bus costs, measured the way users decide. Deliveries
 * per core-second of the memory bus (one instance, the baseline) and of the Redis bus with 1, 2 and
 * 4 instances on one real redis-server, at 10 and 1,000 streams per instance and events of 100 B
 * and 4 KB, in a closed loop that publishes as fast as the deliveries keep up; then publish latency
 * in an open loop at 25%, 50% and 75% of each case's measured capacity. Results go to
 * benchmarks/results/bus.{json,md,svg} (a quick or targeted run's to benchmarks/results/tmp/).
 */
import { mkdirSync } from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { startRedis } from '../lib/redis-server'
import { Histogram } from '../lib/histogram'
import { IpcClient } from '../lib/ipc'
import { endLoadRecord } from '../lib/machine-load'
import { startBenchRun } from '../lib/bench-run'
import { spawnSibling } from '../lib/spawn-sibling'
import type { Mark, OpenLoopReply, StartReply } from './instance'
import { inFlightFor, parseArgs, setupsOf, USAGE, type BusPlan, type BusSetup } from './plan'
import { busTargets, capacityFigures, latencyFigures, writeBusReport, type BusFailure, type BusResults, type BusRow, type LatencyFigures, type WindowEnd } from './report'

export type Log = (line: string) => void
const logToStderr: Log = (line) => process.stderr.write(`[bus] ${line}\n`)

const REQUEST_MS = 30_000
const OPEN_MS = 60_000
/** The capacity loop stops itself this long after its window should have ended, whatever the runner does. */
const LOOP_MARGIN_MS = 10_000
/** …and after this many publishes per instance. */
const MAX_PUBLISHES = 20_000_000
let keys = 0

/** What a reader process answers: frames per stream so far, and its CPU (µs). */
interface Counts { frames: number[], cpuUs: number }

async function waitForStreams (instances: IpcClient[], count: number): Promise<void> {
  const deadline = Date.now() + OPEN_MS
  for (const instance of instances) {
    while (await instance.request<number>({ type: 'size' }, REQUEST_MS) < count) {
      if (Date.now() > deadline) throw new Error(`${instance.label}: fewer than ${count} streams open after ${OPEN_MS} ms`)
      await sleep(20)
    }
  }
}

/** redis-server's used_cpu_user + used_cpu_sys, in seconds. */
async function redisCpu (client: Redis | null): Promise<number | null> {
  if (client === null) return null
  const info = await client.info('cpu')
  const read = (name: string): number => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? Number.NaN)
  return read('used_cpu_user') + read('used_cpu_sys')
}

async function windowEnd (instances: IpcClient[], readers: IpcClient[], redis: Redis | null): Promise<WindowEnd> {
  const [redisCpuS, marks, counts] = await Promise.all([
    redisCpu(redis),
    Promise.all(instances.map((i) => i.request<Mark>({ type: 'mark' }, REQUEST_MS))),
    Promise.all(readers.map((r) => r.request<Counts>({ type: 'counts' }, REQUEST_MS)))
  ])
  return { marks, redisCpuS, clientCpuUs: counts.reduce((sum, c) => sum + c.cpuUs, 0), runnerAtMs: performance.now() }
}

/**
 * Waits (at most drainMs) until every stream has read every event its instance fanned out since
 * the streams opened; returns the shortfall (stream × event) and the streams no longer open.
 */
async function drain (instances: IpcClient[], readers: IpcClient[], baseline: number[][], eventsAtOpen: number[], streams: number, drainMs: number): Promise<{ undelivered: number, dropped: number, closed: Record<string, number> }> {
  const deadline = Date.now() + drainMs
  for (;;) {
    const marks = await Promise.all(instances.map((i) => i.request<Mark>({ type: 'mark' }, REQUEST_MS)))
    const counts = await Promise.all(readers.map((r) => r.request<Counts>({ type: 'counts' }, REQUEST_MS)))
    let undelivered = 0
    marks.forEach((mark, i) => {
      const owed = mark.events - eventsAtOpen[i]
      counts[i].frames.forEach((frames, s) => { undelivered += Math.max(0, owed - (frames - baseline[i][s])) })
    })
    const dropped = marks.reduce((sum, m) => sum + streams - m.streams, 0)
    const closed: Record<string, number> = {}
    for (const m of marks) for (const [reason, n] of Object.entries(m.closed)) closed[reason] = (closed[reason] ?? 0) + n
    if (undelivered === 0 || Date.now() >= deadline) return { undelivered, dropped, closed }
    await sleep(50)
  }
}

/** One setup × stream count, in fresh processes on a fresh key: one row per event size. */
export async function measureCell (redisUrl: string | null, plan: BusPlan, setup: BusSetup, streams: number, log: Log, profileDir: string | null = null): Promise<BusRow[]> {
  const key = `bus-bench-${process.pid}-${++keys}`
  // One folder per cell; V8 names each profile after its process.
  const nodeFlags = profileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${path.join(profileDir, `${setup.bus}-${setup.instances}x${streams}`)}`]
  const clients = Array.from({ length: setup.instances }, (_, i) => new IpcClient(spawnSibling(__filename, 'instance', { nodeFlags }), `${setup.bus} instance ${i}`))
  // Each instance's streams in a process of their own (readers.ts says why), with room for their sockets.
  const readers = Array.from({ length: setup.instances }, (_, i) => new IpcClient(spawnSibling(__filename, 'readers', { raiseFileLimit: true }), `streams of instance ${i}`))
  const info = setup.bus === 'redis' && redisUrl !== null ? new Redis(redisUrl, { maxRetriesPerRequest: 1 }) : null
  info?.on('error', () => {})
  const label = (bytes: number): string => `${setup.bus === 'memory' ? 'memory' : `Redis ×${setup.instances}`}, ${streams} streams, ${bytes} B`
  try {
    const redis = setup.bus === 'redis' ? redisUrl : null
    if (setup.bus === 'redis' && redis === null) throw new Error('the Redis bus needs a redis-server')
    const ports = await Promise.all(clients.map(async (client) =>
      (await client.request<StartReply>({ type: 'start', key, maxClients: streams, redis }, REQUEST_MS)).port))
    await Promise.all(readers.map((reader, i) => reader.request({ type: 'open', port: ports[i], count: streams }, REQUEST_MS)))
    await waitForStreams(clients, streams)
    await Promise.all(readers.map((reader) => reader.request({ type: 'opened' }, REQUEST_MS)))
    // What a stream gets on opening (its retry: frame) arrives a moment after it counts as open.
    await sleep(200)
    const baseline = (await Promise.all(readers.map((r) => r.request<Counts>({ type: 'counts' }, REQUEST_MS)))).map((c) => c.frames)
    const eventsAtOpen = (await Promise.all(clients.map((c) => c.request<Mark>({ type: 'mark' }, REQUEST_MS)))).map((m) => m.events)
    const rows: BusRow[] = []
    for (const bytes of plan.bytes) {
      await Promise.all(clients.map((client) => client.request({
        type: 'load-start',
        bytes,
        inFlight: inFlightFor(plan, bytes),
        backlogBytesPerStream: plan.backlogBytesPerStream,
        maxMs: plan.warmupMs + plan.measureMs + LOOP_MARGIN_MS,
        maxPublishes: MAX_PUBLISHES
      }, REQUEST_MS)))
      await sleep(plan.warmupMs)
      const start = await windowEnd(clients, readers, info)
      await sleep(plan.measureMs)
      const end = await windowEnd(clients, readers, info)
      await Promise.all(clients.map((client) => client.request({ type: 'load-stop' }, REQUEST_MS)))
      const capacity = capacityFigures(start, end)
      log(`${label(bytes)}: capacity ${capacity.publishesPerSec} publishes/s, ${capacity.deliveriesPerSec} deliveries/s, ${capacity.deliveriesPerCoreSecond} per core-second (instances ${capacity.instanceCpuPct}% CPU${capacity.redisCpuPct === null ? '' : `, Redis ${capacity.redisCpuPct}%`}, clients ${capacity.clientCpuPct}%)${capacity.failed > 0 ? `, ${capacity.failed} failed` : ''}`)
      let state = await drain(clients, readers, baseline, eventsAtOpen, streams, plan.drainMs)
      const latency: LatencyFigures[] = []
      for (const fraction of capacity.publishesPerSec > 0 ? plan.fractions : []) {
        const offered = fraction * capacity.publishesPerSec
        const replies = await Promise.all(clients.map((client) => client.request<OpenLoopReply>({
          type: 'open-loop', bytes, perSec: offered / setup.instances, warmupMs: plan.latencyWarmupMs, measureMs: plan.latencyMs
        }, plan.latencyWarmupMs + plan.latencyMs + REQUEST_MS)))
        const merged = new Histogram()
        for (const reply of replies) merged.merge(reply.latencyUs)
        const quantiles = merged.count === 0
          ? { p50Us: Number.NaN, p99Us: Number.NaN, maxUs: Number.NaN }
          : { p50Us: merged.quantile(0.5), p99Us: merged.quantile(0.99), maxUs: merged.max }
        const figures = latencyFigures(fraction, offered, replies, quantiles)
        latency.push(figures)
        log(`${label(bytes)}: ${fraction * 100}% = ${figures.offeredPerSec}/s: p50 ${figures.p50Ms} ms, p99 ${figures.p99Ms} ms, max ${figures.maxMs} ms, at most ${figures.maxInFlight} in flight, loop delay p99 ${figures.loopDelayP99Ms} ms${figures.failed > 0 ? `, ${figures.failed} failed` : ''}`)
        state = await drain(clients, readers, baseline, eventsAtOpen, streams, plan.drainMs)
      }
      if (state.undelivered > 0 || state.dropped > 0) log(`${label(bytes)}: ${state.undelivered} undelivered after ${plan.drainMs} ms, ${state.dropped} streams dropped (${JSON.stringify(state.closed)})`)
      rows.push({ bus: setup.bus, instances: setup.instances, streamsPerInstance: streams, bytes, capacity, latency, undelivered: state.undelivered, streamsDropped: state.dropped, streamsClosed: state.closed })
    }
    return rows
  } finally {
    info?.disconnect()
    await Promise.all(readers.map(async (reader) => {
      await reader.request({ type: 'close' }, REQUEST_MS).catch(() => {})
      await reader.exit()
    }))
    await Promise.all(clients.map(async (client) => {
      await client.request({ type: 'close' }, REQUEST_MS).catch(() => {})
      // A CPU profile is written as the process exits: give it time.
      await client.exit(profileDir === null ? 2000 : 60_000)
    }))
  }
}

/**
 * The plan's cells, one after another (never two competing for the CPUs), the memory baseline
 * first. A cell that fails (its processes could not start, its streams not open) is logged and
 * listed in `failures`; the others still run.
 */
export async function runBus (plan: BusPlan, redisUrl: string | null, log: Log = logToStderr, profileDir: string | null = null): Promise<{ rows: BusRow[], failures: BusFailure[] }> {
  const rows: BusRow[] = []
  const failures: BusFailure[] = []
  for (const setup of setupsOf(plan)) {
    for (const streams of plan.streams) {
      try {
        rows.push(...await measureCell(redisUrl, plan, setup, streams, log, profileDir))
      } catch (error) {
        const failure = { bus: setup.bus, instances: setup.instances, streamsPerInstance: streams, error: error instanceof Error ? error.message : String(error) }
        log(`${setup.bus} ×${setup.instances}, ${streams} streams: FAILED: ${failure.error}`)
        failures.push(failure)
      }
    }
  }
  return { rows, failures }
}

async function redisVersion (url: string): Promise<string> {
  const client = new Redis(url, { maxRetriesPerRequest: 1, retryStrategy: () => null })
  client.on('error', () => {})
  try {
    return /redis_version:(\S+)/.exec(await client.info('server'))?.[1] ?? 'unknown'
  } finally {
    client.disconnect()
  }
}

async function main (): Promise<void> {
  const run = startBenchRun(process.argv.slice(2), parseArgs, USAGE, __dirname)
  if (run === null) return
  const { args: { plan, cpuProfile }, load } = run
  const profileDir = cpuProfile ? path.join(load.dir, 'bus-profiles') : null
  if (profileDir !== null) mkdirSync(profileDir, { recursive: true })
  const started = Date.now()
  // Only a run with the Redis bus starts a redis-server.
  const redis = plan.buses.includes('redis') ? await startRedis() : null
  try {
    const { rows, failures } = await runBus(plan, redis?.url ?? null, logToStderr, profileDir)
    const results: BusResults = {
      finishedAt: new Date().toISOString(),
      durationS: Math.round((Date.now() - started) / 1000),
      redisVersion: redis === null ? 'none (memory bus only)' : await redisVersion(redis.url),
      machine: endLoadRecord(load),
      machineNote: load.note,
      plan,
      rows,
      failures,
      targets: busTargets(rows)
    }
    process.stdout.write(await writeBusReport(load.dir, results) + '\n')
    logToStderr(`${plan.name} run done in ${results.durationS} s; wrote ${path.join(load.dir, 'bus.{json,md,svg}')}${profileDir === null ? '' : ` and CPU profiles in ${profileDir}`}`)
  } finally {
    await redis?.kill()
  }
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`[bus] ${error instanceof Error ? error.message : String(error)}\n`)
    process.exitCode = 1
  })
}
