/**
 * A client-holder process: keeps many SSE streams open on raw TCP sockets and records, for
 * each event, how long after its stamp it arrived. Kept cheap on purpose (no HTTP parser, no
 * SSE parser, one clock reading per read): its CPU competes with the server's.
 */
import net from 'node:net'
import { Histogram, type HistogramCounts } from '../histogram'
import { serveIpc, type IpcRequest } from '../ipc'
import { openFileLimit } from '../spawn-sibling'
import { nowUs } from './payload'
import { StampScanner } from './stamp-scanner'

export interface ConnectReply { admitted: number, doneUs: number, errors: string[] }
export interface CollectReply {
  /** Events received in this phase, over all streams. */
  received: number
  latencyUs: { counts: HistogramCounts, max: number }
  /** When the last event of the phase arrived (µs, shared monotonic clock); 0 if none did. */
  lastArrivalUs: number
  /** CPU this process used since the phase began (user + system). */
  cpuUs: number
}

interface Stream {
  socket: net.Socket
  open: boolean
  /** Events seen since the last reset. */
  events: number
}

const streams: Stream[] = []
let latency = new Histogram()
/** When the read being scanned arrived: one clock reading serves every event in it. */
let readAtUs = 0
let lastArrivalUs = 0
let phaseCpu = process.cpuUsage()

function onStamp (this: Stream, stampUs: number): void {
  this.events++
  latency.record(readAtUs - stampUs)
  lastArrivalUs = readAtUs
}

function field (request: IpcRequest, name: string): unknown {
  if (request[name] === undefined) throw new Error(`"${request.type}" needs ${name}`)
  return request[name]
}

/** Opens one stream; resolves true once the server answered 200, false on anything else. */
function openStream (port: number, localAddress: string, path: string, marker: string | undefined, errors: string[]): Promise<boolean> {
  return new Promise((resolve) => {
    const stream: Stream = { socket: net.connect({ host: '127.0.0.1', port, localAddress }), open: true, events: 0 }
    const scanner = new StampScanner(marker)
    const countStamp = onStamp.bind(stream)
    let answered = false
    stream.socket.setNoDelay(true)
    stream.socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAccept: text/event-stream\r\n\r\n`)
    stream.socket.on('data', (chunk: Buffer) => {
      if (!answered) {
        answered = true
        const admitted = chunk.toString('latin1', 0, 13) === 'HTTP/1.1 200 '
        if (!admitted) {
          if (errors.length < 5) errors.push(chunk.toString('latin1', 0, chunk.indexOf('\r\n')))
          stream.socket.destroy()
          resolve(false)
          return
        }
        streams.push(stream)
        resolve(true)
      }
      readAtUs = nowUs()
      scanner.scan(chunk, countStamp)
    })
    stream.socket.on('error', (error) => {
      if (errors.length < 5) errors.push(error.message)
    })
    stream.socket.on('close', () => {
      stream.open = false
      if (!answered) {
        answered = true
        resolve(false)
      }
    })
  })
}

serveIpc('fanout client', {
  fileLimit: () => openFileLimit(),

  /** Opens `count` streams, at most `concurrency` connecting at once. */
  connect: async (request): Promise<ConnectReply> => {
    const port = Number(field(request, 'port'))
    const count = Number(field(request, 'count'))
    const concurrency = Number(field(request, 'concurrency'))
    const localAddress = String(field(request, 'localAddress'))
    const path = String(field(request, 'path'))
    // Optional: where the stamp sits in the payload, when it is not the fanout's own event.
    const marker = request.marker === undefined ? undefined : String(request.marker)
    const errors: string[] = []
    let next = 0
    let admitted = 0
    const worker = async (): Promise<void> => {
      while (next < count) {
        next++
        if (await openStream(port, localAddress, path, marker, errors)) admitted++
      }
    }
    await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker))
    return { admitted, doneUs: nowUs(), errors }
  },

  /** Starts a phase: forget what earlier phases received. */
  reset: () => {
    latency = new Histogram()
    lastArrivalUs = 0
    phaseCpu = process.cpuUsage()
    for (const stream of streams) stream.events = 0
  },

  /**
   * Waits until every open stream has `perStream` events or `timeoutMs` passes, then reports.
   * The latest arrival is taken from the reads, not from when the wait noticed it.
   */
  collect: async (request): Promise<CollectReply> => {
    const perStream = Number(field(request, 'perStream'))
    const deadline = Date.now() + Number(field(request, 'timeoutMs'))
    const done = (): boolean => streams.every((s) => !s.open || s.events >= perStream)
    while (!done() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
    const received = streams.reduce((sum, stream) => sum + stream.events, 0)
    const { user, system } = process.cpuUsage(phaseCpu)
    return { received, latencyUs: latency.toJSON(), lastArrivalUs, cpuUs: user + system }
  }
})
