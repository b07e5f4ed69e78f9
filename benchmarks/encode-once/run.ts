/**
 * Broadcast cost at 1,000 clients with the event encoded once (what `fastify.sse.broadcast`
 * does) versus encoded again for every client (the loop it replaced), alternating the two in one
 * run on the same open streams. Writes benchmarks/results/encode-once.{json,md}.
 *
 *   npm run bench:build && node build/benchmarks/encode-once/run.js [--clients N] [--rounds N] [--force]
 */
import { writeFileSync, mkdirSync } from 'node:fs'
import type { ServerResponse } from 'node:http'
import net from 'node:net'
import path from 'node:path'
import Fastify from 'fastify'
import towerSse from '../../lib'
import { encodeEvent } from '../../lib/events/encoder'
import { Histogram } from '../lib/histogram'
import { finishLoadRecord, startLoadRecord, takeForce } from '../lib/machine-load'
import { markdownTable } from '../lib/markdown-table'
import { repoRoot } from '../lib/repo-root'

interface Args { clients: number, rounds: number }

function parseArgs (argv: string[]): Args {
  const args: Args = { clients: 1000, rounds: 400 }
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '')
    const value = Number(argv[i + 1])
    if (!(name in args) || !Number.isSafeInteger(value) || value < 1) {
      throw new Error(`encode-once: expected --clients N or --rounds N (positive integers), got ${argv[i]} ${argv[i + 1]}`)
    }
    args[name as keyof Args] = value
  }
  return args
}

async function main (): Promise<void> {
  const { force, argv } = takeForce(process.argv.slice(2))
  const { clients, rounds } = parseArgs(argv)
  const committed = path.join(repoRoot(__dirname), 'benchmarks', 'results')
  const load = startLoadRecord(committed, committed, force)
  const app = Fastify()
  // Each stream's response, kept by the benchmark itself to replay the per-client-encode loop on it.
  const writers: ServerResponse[] = []
  app.addHook('onRequest', (request, reply, done) => {
    if (request.url === '/api/events') writers.push(reply.raw)
    done()
  })
  await app.register(towerSse, { maxClients: clients, heartbeatMs: 3_600_000, maxAgeMs: 0, history: { events: 100 } })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const port = (app.server.address() as net.AddressInfo).port
  const sockets: net.Socket[] = []
  for (let i = 0; i < clients; i++) {
    const socket = net.connect(port, '127.0.0.1')
    socket.write('GET /api/events HTTP/1.1\r\nHost: localhost\r\n\r\n')
    socket.resume()
    sockets.push(socket)
  }
  while (app.sse.size < clients) await new Promise((resolve) => setTimeout(resolve, 10))

  const payload = { type: 'notification', title: 'build finished', body: 'x'.repeat(80), ts: 0 }
  let seq = 0
  const once = (): void => { void app.sse.broadcast({ ...payload, ts: Date.now() }) }
  const perClient = (): void => {
    const data = { ...payload, ts: Date.now() }
    seq++
    for (const writer of writers) writer.write(encodeEvent({ data, id: `x-${seq}` }))
  }
  const variants = { 'encode once': { run: once, h: new Histogram() }, 'encode per client': { run: perClient, h: new Histogram() } }
  const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 2))
  for (let round = 0; round < rounds; round++) {
    for (const variant of Object.values(variants)) {
      const started = process.hrtime.bigint()
      variant.run()
      if (round >= 20) variant.h.record(Number(process.hrtime.bigint() - started) / 1000)
      await settle()
    }
    if (round % 50 === 0) process.stdout.write(`\rencode-once: round ${round}/${rounds}`)
  }
  process.stdout.write('\n')
  for (const socket of sockets) socket.destroy()
  await app.close()

  const rows = Object.entries(variants).map(([name, { h }]) => ({
    variant: name, clients, samples: h.count, p50Us: Math.round(h.quantile(0.5)), p90Us: Math.round(h.quantile(0.9)), p99Us: Math.round(h.quantile(0.99))
  }))
  const ratio = rows[1].p50Us / rows[0].p50Us
  const results = { generatedAt: new Date().toISOString(), node: process.version, clients, rounds, rows, perClientOverOnceP50: Number(ratio.toFixed(2)) }
  const table = markdownTable(['variant', 'clients', 'p50 µs', 'p90 µs', 'p99 µs'],
    rows.map((r) => [r.variant, String(r.clients), String(r.p50Us), String(r.p90Us), String(r.p99Us)]),
    ['left', 'right', 'right', 'right', 'right']) + `\nEncoding per client costs ${ratio.toFixed(2)}× the p50 broadcast time of encoding once (same run, same ${clients} streams).\n`
  mkdirSync(load.dir, { recursive: true })
  writeFileSync(path.join(load.dir, 'encode-once.json'), JSON.stringify(results, null, 2) + '\n')
  writeFileSync(path.join(load.dir, 'encode-once.md'), table)
  finishLoadRecord(load, 'encode-once')
  process.stdout.write(table)
}

main().catch((error: Error) => {
  process.stderr.write(`encode-once: ${error.message}\n`)
  process.exit(1)
})
