/**
 * `npm run bench:bus [-- --quick]`: publishes/s and publish latency through one real redis-server,
 * for 1 and 2 instances with 10 and 1,000 streams each and events of 100 bytes and 4 KB, one
 * script call per publish against the turn's publishes in one pipeline. Results go to
 * benchmarks/results/bus.{json,md,svg} (a quick or targeted run's to benchmarks/results/tmp/).
 */
import net from 'node:net'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { startRedis } from '../lib/redis-server'
import { Histogram } from '../lib/histogram'
import { IpcClient } from '../lib/ipc'
import { endLoadRecord, startLoadRecord, takeForce } from '../lib/machine-load'
import { repoRoot } from '../lib/repo-root'
import { resultsDir } from '../lib/results-files'
import { spawnSibling } from '../lib/spawn-sibling'
import type { PublishReply, StartReply } from './instance'
import { parseArgs, STREAM_PATH, USAGE, type BusPlan, type PublishMode } from './plan'
import { busTargets, writeBusReport, type BusResults, type BusRow } from './report'

export type Log = (line: string) => void
const logToStderr: Log = (line) => process.stderr.write(`[bus] ${line}\n`)

const REQUEST_MS = 30_000
const OPEN_MS = 60_000
let keys = 0

/** `count` streams on `port`, each a raw socket that reads (and counts) everything. */
function openStreams (port: number, count: number): { sockets: net.Socket[], bytes: () => number } {
  let bytes = 0
  const sockets = Array.from({ length: count }, () => {
    const socket = net.connect(port, '127.0.0.1')
    socket.on('error', () => {})
    socket.on('data', (chunk: Buffer) => { bytes += chunk.length })
    socket.write(`GET ${STREAM_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)
    return socket
  })
  return { sockets, bytes: () => bytes }
}

async function waitForStreams (instances: IpcClient[], count: number): Promise<void> {
  const deadline = Date.now() + OPEN_MS
  for (const instance of instances) {
    while (await instance.request<number>({ type: 'size' }, REQUEST_MS) < count) {
      if (Date.now() > deadline) throw new Error(`${instance.label}: fewer than ${count} streams open after ${OPEN_MS} ms`)
      await sleep(20)
    }
  }
}

const round = (n: number, digits = 3): number => Number(n.toFixed(digits))

/** One instance count × stream count × mode, in fresh processes on a fresh key: one row per event size. */
export async function measureCell (redisUrl: string, plan: BusPlan, instances: number, streams: number, mode: PublishMode, log: Log): Promise<BusRow[]> {
  const key = `bus-bench-${process.pid}-${++keys}`
  const clients = Array.from({ length: instances }, (_, i) => new IpcClient(spawnSibling(__filename, 'instance'), `instance ${i}`))
  const opened: Array<ReturnType<typeof openStreams>> = []
  try {
    const ports = await Promise.all(clients.map(async (client) =>
      (await client.request<StartReply>({ type: 'start', key, maxClients: streams, redis: redisUrl }, REQUEST_MS)).port))
    for (const port of ports) opened.push(openStreams(port, streams))
    await waitForStreams(clients, streams)
    const rows: BusRow[] = []
    for (const bytes of plan.bytes) {
      const publish = (ms: number, warmup: boolean): Promise<PublishReply[]> => Promise.all(clients.map((client) =>
        client.request<PublishReply>({ type: 'publish', inFlight: plan.inFlight, ms, bytes, warmup }, ms + REQUEST_MS)))
      await publish(plan.warmupMs, true)
      const readBefore = opened.reduce((sum, s) => sum + s.bytes(), 0)
      const replies = await publish(plan.measureMs, false)
      // What the last publishes put on the wire reaches the streams a moment after they settle.
      await sleep(50)
      const read = opened.reduce((sum, s) => sum + s.bytes(), 0) - readBefore
      const latency = new Histogram()
      for (const reply of replies) latency.merge(reply.latencyUs)
      const sent = replies.reduce((sum, r) => sum + r.sent, 0)
      const failed = replies.reduce((sum, r) => sum + r.failed, 0)
      const errors: Record<string, number> = {}
      for (const reply of replies) for (const [code, n] of Object.entries(reply.errors)) errors[code] = (errors[code] ?? 0) + n
      const seconds = Math.max(...replies.map((r) => r.elapsedMs)) / 1000
      const row: BusRow = {
        instances,
        streamsPerInstance: streams,
        bytes,
        mode,
        published: sent - failed,
        failed,
        errors,
        publishesPerSec: Math.round((sent - failed) / seconds),
        p50Ms: round(latency.quantile(0.5) / 1000),
        p99Ms: round(latency.quantile(0.99) / 1000),
        maxMs: round(latency.max / 1000),
        streamBytes: Math.round(read / (instances * streams))
      }
      log(`${instances} instance(s) × ${streams} streams, ${bytes} B, ${mode}: ${row.publishesPerSec} publishes/s, p50 ${row.p50Ms} ms, p99 ${row.p99Ms} ms${failed > 0 ? `, ${failed} failed` : ''}`)
      rows.push(row)
    }
    return rows
  } finally {
    for (const { sockets } of opened) for (const socket of sockets) socket.destroy()
    await Promise.all(clients.map(async (client) => {
      await client.request({ type: 'close' }, REQUEST_MS).catch(() => {})
      await client.exit()
    }))
  }
}

/** The plan's cells, one after another (never two competing for the CPUs); the modes of a case back to back, alternating which goes first. */
export async function runBus (plan: BusPlan, redisUrl: string, log: Log = logToStderr): Promise<BusRow[]> {
  const rows: BusRow[] = []
  let cell = 0
  for (const instances of plan.instances) {
    for (const streams of plan.streams) {
      const modes = cell++ % 2 === 0 ? plan.modes : [...plan.modes].reverse()
      for (const mode of modes) rows.push(...await measureCell(redisUrl, plan, instances, streams, mode, log))
    }
  }
  const order = (r: BusRow): number[] => [r.instances, r.streamsPerInstance, r.bytes, plan.modes.indexOf(r.mode)]
  return rows.sort((a, b) => {
    const [x, y] = [order(a), order(b)]
    return x.map((v, i) => v - y[i]).find((d) => d !== 0) ?? 0
  })
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
  const { force, argv } = takeForce(process.argv.slice(2))
  const { plan, outDir, help, targeted } = parseArgs(argv)
  if (help) {
    process.stdout.write(`${USAGE}\n`)
    return
  }
  const root = repoRoot(__dirname)
  const committed = path.join(root, 'benchmarks', 'results')
  const load = startLoadRecord(resultsDir(root, outDir, plan.name === 'quick' || targeted), committed, force)
  const started = Date.now()
  const redis = await startRedis()
  try {
    const rows = await runBus(plan, redis.url)
    const results: BusResults = {
      finishedAt: new Date().toISOString(),
      durationS: Math.round((Date.now() - started) / 1000),
      redisVersion: await redisVersion(redis.url),
      machine: endLoadRecord(load),
      machineNote: load.note,
      plan,
      rows,
      targets: busTargets(rows)
    }
    process.stdout.write(await writeBusReport(load.dir, results) + '\n')
    logToStderr(`${plan.name} run done in ${results.durationS} s; wrote ${path.join(load.dir, 'bus.{json,md,svg}')}`)
  } finally {
    await redis.kill()
  }
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`[bus] ${error instanceof Error ? error.message : String(error)}\n`)
    process.exitCode = 1
  })
}
