/**
 * The streams of one instance of the bus benchmark, in a process of their own: raw sockets that
 * read everything and count the frames they got. Apart from the runner because a process reading
 * a thousand sockets that are always readable stays in its poll phase for seconds, and the
 * runner's timers (the windows it measures) must not wait on that.
 */
import net from 'node:net'
import { serveIpc, type IpcRequest } from '../lib/ipc'
import { FrameCounter } from './loops'
import { STREAM_PATH } from './plan'

/**
 * One buffer every socket of this process reads into (net's `onread`): the callback counts the
 * frames before the next read, so one buffer serves them all and no read allocates.
 */
const READ_BUFFER = Buffer.allocUnsafe(256 * 1024)
/** A stream refused while the streams open (an instance still proving it receives) is opened again after this. */
const REOPEN_MS = 100

/**
 * `count` streams on `port`, each a raw socket whose frames are counted as they arrive. Until
 * `opened()`, a socket that closes (a refusal) is opened again; after it, a closed stream stays
 * closed and the instance's stats tell why.
 */
class Streams {
  readonly counters: FrameCounter[] = []
  private readonly sockets: Array<net.Socket | null> = []
  private opening = true

  constructor (private readonly port: number, count: number) {
    for (let i = 0; i < count; i++) this.connect(i)
  }

  private connect (i: number): void {
    const counter = new FrameCounter()
    this.counters[i] = counter
    const socket = net.connect({
      port: this.port,
      host: '127.0.0.1',
      onread: { buffer: READ_BUFFER, callback: (length, buffer) => { counter.add(buffer as Buffer, length); return true } }
    })
    this.sockets[i] = socket
    socket.on('error', () => {})
    socket.once('close', () => {
      if (this.sockets[i] !== socket) return
      this.sockets[i] = null
      if (this.opening) setTimeout(() => { if (this.opening) this.connect(i) }, REOPEN_MS)
    })
    socket.write(`GET ${STREAM_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)
  }

  /** Every stream is open: from now on a closed one is not opened again. */
  opened (): void {
    this.opening = false
  }

  destroy (): void {
    this.opening = false
    for (const socket of this.sockets) socket?.destroy()
  }
}

let streams: Streams | null = null

function integer (request: IpcRequest, field: string): number {
  const value = request[field]
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) throw new Error(`"${request.type}" needs ${field} as an integer >= 1, got ${String(value)}`)
  return value
}

function held (): Streams {
  if (streams === null) throw new Error('no streams opened yet (send "open" first)')
  return streams
}

serveIpc('bus stream readers', {
  open: (request) => {
    if (streams !== null) throw new Error('streams already open in this process')
    streams = new Streams(integer(request, 'port'), integer(request, 'count'))
    return null
  },
  /** The instance counts them all open: a stream that closes from now on stays closed. */
  opened: () => {
    held().opened()
    return null
  },
  /** Frames each stream has read so far, and this process's CPU (µs, user + system). */
  counts: () => {
    const { user, system } = process.cpuUsage()
    return { frames: held().counters.map((c) => c.frames), cpuUs: user + system }
  },
  close: () => {
    streams?.destroy()
    streams = null
    return null
  }
})
