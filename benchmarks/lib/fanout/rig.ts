/**
 * The fan-out rig both bench:fanout and bench:scale drive: a contender server process (server.ts)
 * and client processes holding raw streams (client.ts), the admission of a population and the
 * timing of one phase of broadcasts.
 */
import type { ChildProcess } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { Histogram } from '../histogram'
import type { IpcClient } from '../ipc'
import { spawnSibling } from '../spawn-sibling'
import type { CollectReply, ConnectReply } from './client'
import { STREAM_PATH } from './contenders/contender'
import { nowUs } from './payload'
import type { CpuReading } from './server'

/** How server.ts sends a burst: each broadcast from its own callback, or all from one loop. */
export const BURST_SOURCES = ['callbacks', 'loop'] as const
export type BurstSource = typeof BURST_SOURCES[number]

/** What admission and a phase need of a bench's plan. */
export interface RigPlan {
  /** Streams held by one client process (more streams → more processes). */
  streamsPerProcess: number
  /** Connects in flight per client process while admitting the population. */
  connectConcurrency: number
  /** Longest wait for every stream to receive a phase's events after sending ends. */
  deliveryTimeoutMs: number
}

/** The contender server in a process of its own; `gc` exposes gc() for the memory readings. */
export function spawnServer (gc: boolean): ChildProcess {
  return spawnSibling(__filename, 'server', { nodeFlags: gc ? ['--expose-gc'] : [], raiseFileLimit: true })
}

/** A client process that holds raw streams (client.ts). */
export function spawnClient (): ChildProcess {
  return spawnSibling(__filename, 'client', { raiseFileLimit: true })
}

/** Longest wait for one IPC answer from a server or client process that is not a phase's delivery. */
export const REQUEST_MS = 30_000
const CONNECT_MS = 180_000
/** Descriptors a process needs beyond its sockets (stdio, IPC, epoll, libuv, …). */
export const SPARE_FILES = 64

/**
 * Loopback source address of client process `i`: each has its own ephemeral port range, and
 * none shares 127.0.0.1's with whatever else runs on the host.
 */
export function sourceAddress (i: number): string {
  return `127.0.7.${1 + i}`
}

/** `total` streams spread as evenly as possible over `parts` processes. */
export function shares (total: number, parts: number): number[] {
  return Array.from({ length: parts }, (_, i) => Math.floor(total / parts) + (i < total % parts ? 1 : 0))
}

export function requireFiles (who: string, limit: number | null, needed: number): void {
  if (limit !== null && limit < needed) {
    throw new Error(`${who} may open ${limit} files but needs ${needed}: raise the hard limit (ulimit -Hn) or lower --clients`)
  }
}

export interface Phase { sent: number, cpuUs: number, wallUs: number, delivered: CollectReply[] }

/** Runs one phase: resets the clients, lets `send` run on the server, waits for delivery. */
export async function phase (
  server: IpcClient, holders: IpcClient[], plan: RigPlan,
  send: () => Promise<number>
): Promise<Phase> {
  await Promise.all(holders.map((h) => h.request({ type: 'reset' }, REQUEST_MS)))
  const before = await server.request<CpuReading>({ type: 'cpu' }, REQUEST_MS)
  const sent = await send()
  const delivered = await Promise.all(holders.map((h) => h.request<CollectReply>(
    { type: 'collect', perStream: sent, timeoutMs: plan.deliveryTimeoutMs }, plan.deliveryTimeoutMs + REQUEST_MS
  )))
  const after = await server.request<CpuReading>({ type: 'cpu' }, REQUEST_MS)
  return { sent, cpuUs: after.cpuUs - before.cpuUs, wallUs: after.atUs - before.atUs, delivered }
}

export function latencyOf (delivered: CollectReply[]): Histogram {
  const merged = new Histogram()
  for (const reply of delivered) merged.merge(reply.latencyUs)
  return merged
}

export const received = (delivered: CollectReply[]): number => delivered.reduce((sum, r) => sum + r.received, 0)

/**
 * Opens every stream (each client process its share, from its own source address) and waits
 * until the server counts them all (`openAfter`, with those open before); returns the time from
 * the first connect to the last 200.
 */
export async function admit (
  server: IpcClient, holders: IpcClient[], plan: RigPlan, port: number, perProcess: number[], label: string, openAfter?: number
): Promise<number> {
  const clients = perProcess.reduce((sum, n) => sum + n, 0)
  /** Streams the server holds once these are in (more than `clients` when some were open before). */
  const expected = openAfter ?? clients
  const startUs = nowUs()
  const connected = await Promise.all(holders.map((holder, i) => holder.request<ConnectReply>({
    type: 'connect', port, path: STREAM_PATH, count: perProcess[i], concurrency: plan.connectConcurrency, localAddress: sourceAddress(i)
  }, CONNECT_MS)))
  const connectMs = (Math.max(...connected.map((c) => c.doneUs)) - startUs) / 1000
  const admitted = connected.reduce((sum, c) => sum + c.admitted, 0)
  if (admitted !== clients) {
    const errors = [...new Set(connected.flatMap((c) => c.errors))].join('; ')
    throw new Error(`${label}: ${admitted} of ${clients} streams admitted (${errors})`)
  }
  // A library may register a stream a moment after its headers went out.
  await until(`${label}: the server counting ${expected} open streams`, async () => await server.request<number>({ type: 'size' }, REQUEST_MS) >= expected)
  return connectMs
}

/** Waits until `condition` holds (asked every 20 ms), failing after 10 s. */
export async function until (what: string, condition: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000
  while (!await condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}
