import http from 'node:http'
import { median } from './rounds'

/** Scrapes of /metrics timed per case, one after another (a Prometheus server scrapes one at a time). */
export const SCRAPES = 20

export interface ScrapeTiming { medianMs: number, maxMs: number }

function timeOne (port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    http.get({ host: '127.0.0.1', port, path, agent: false }, (response) => {
      if (response.statusCode !== 200) reject(new Error(`GET ${path} answered ${String(response.statusCode)}`))
      response.resume()
      response.once('end', () => resolve(performance.now() - started))
      response.once('error', reject)
    }).once('error', reject)
  })
}

/** `count` scrapes of `path`, each on its own connection: request sent → last byte of the answer. */
export async function timeScrapes (port: number, path: string, count = SCRAPES): Promise<ScrapeTiming> {
  const times: number[] = []
  for (let i = 0; i < count; i++) times.push(await timeOne(port, path))
  return { medianMs: Number(median(times).toFixed(3)), maxMs: Number(Math.max(...times).toFixed(3)) }
}
