import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { BenchEvent } from '../payload'
import { STREAM_PATH, type StartContender } from './contender'

const RETRY_FRAME = Buffer.from('retry: 5000\n\n')
const HEARTBEAT_FRAME = Buffer.from(':\n\n')

/**
 * The baseline: node:http and a Set of responses, each event serialised once and written to
 * every response. Nothing any library can do is cheaper, so every figure is a ratio to this.
 */
export const startRaw: StartContender = async ({ heartbeatMs }) => {
  const streams = new Set<http.ServerResponse>()
  const server = http.createServer((request, response) => {
    if (request.url !== STREAM_PATH) {
      response.writeHead(404).end()
      return
    }
    response.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive'
    })
    response.write(RETRY_FRAME)
    streams.add(response)
    response.on('close', () => streams.delete(response))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  // The same one-timer sweep tower-sse runs, so an idle loop compares like with like.
  const heartbeat = heartbeatMs === undefined
    ? undefined
    : setInterval(() => { for (const response of streams) response.write(HEARTBEAT_FRAME) }, heartbeatMs)
  return {
    port: (server.address() as AddressInfo).port,
    size: () => streams.size,
    broadcast: (event: BenchEvent) => {
      const frame = Buffer.from(`data: ${JSON.stringify(event)}\n\n`)
      for (const response of streams) response.write(frame)
    },
    close: async () => {
      clearInterval(heartbeat)
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
