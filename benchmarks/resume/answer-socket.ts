/**
 * One request for an answer on a raw socket (no HTTP client, no EventSource: cheap, and nothing
 * between the bench and the bytes), its response read by SseResponseReader.
 */
import net from 'node:net'
import { SseResponseReader, type SseFrame } from './sse-reader'

export interface AnswerRequest {
  method: 'GET' | 'POST'
  path: string
  headers: Record<string, string | number>
}

export interface AnswerSocket {
  readonly socket: net.Socket
  readonly reader: SseResponseReader
  /** Resolves when the socket has closed: the response ended (by the server's close, or complete by its framing), the socket was cut, or it failed. */
  readonly closed: Promise<void>
  /** The socket's error, if it had one. */
  error: () => string | null
}

export function requestText (port: number, request: AnswerRequest): string {
  const headers = Object.entries(request.headers).map(([name, value]) => `${name}: ${value}\r\n`).join('')
  return `${request.method} ${request.path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAccept: text/event-stream\r\n${headers}Content-Length: 0\r\n\r\n`
}

/** Sends `request` to 127.0.0.1:`port`; `onFrames` gets the frames of each read, in order. */
export function openAnswer (port: number, request: AnswerRequest, onFrames: (frames: SseFrame[], reader: SseResponseReader) => void): AnswerSocket {
  const reader = new SseResponseReader()
  const socket = net.connect(port, '127.0.0.1')
  let failure: string | null = null
  socket.setNoDelay(true)
  socket.setEncoding('latin1')
  socket.on('error', (error) => { failure = error.message })
  socket.on('data', (text: string) => {
    const frames = reader.push(text)
    if (frames.length > 0 || reader.status !== 0) onFrames(frames, reader)
    // A response complete by its framing (a 204, a 500 with its length, a chunked body's last chunk)
    // is over even if the server keeps the connection alive for another request.
    if (reader.done) socket.destroy()
  })
  socket.write(requestText(port, request))
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  return { socket, reader, closed, error: () => failure }
}
