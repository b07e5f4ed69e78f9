#!/usr/bin/env node
import cluster from 'node:cluster'
import type { FastifyInstance } from 'fastify'
import { buildTower } from './app'
import { runPrimary } from './cluster'
import { describeLimits, describeTrustProxy, parseConfig, TowerConfigError, usage, type TowerConfig } from './config'
import { chooseLogFormat, loadPinoPretty, towerLogger } from './logging'
import { DEFAULT_ALLOWED_HOSTS } from './request-guard'
import { redactRedisUrl } from '../bus/redis/url'
import { sseOf } from '..'

// close() takes the staged drain (drainMs) and then a moment for the last bytes and the onClose
// hooks; past drainMs plus this, a close that hangs is cut short.
const CLOSE_MARGIN_MS = 2000

function fail (message: string): never {
  process.stderr.write(`tower: ${message}\n`)
  process.exit(1)
}

function listenFailure (err: NodeJS.ErrnoException, { host, port }: TowerConfig): string {
  // The plugin's own start-up errors (the bus's above all) say what happened: no "cannot listen" around them.
  if (err.code?.startsWith('TOWER_SSE_') === true) return err.message.replace(/^tower-sse: /, '')
  switch (err.code) {
    case 'EADDRINUSE': return `port ${port} on ${host} is already in use`
    case 'EACCES': return `not allowed to listen on port ${port} on ${host}`
    case 'EADDRNOTAVAIL': return `address ${host} is not available on this machine`
    case 'ENOTFOUND': case 'EAI_AGAIN': return `cannot resolve host ${host}`
    default: return `cannot listen on ${host}:${port}: ${err.message}`
  }
}

function closeOnSignal (app: FastifyInstance, drainMs: number): void {
  const deadlineMs = drainMs + CLOSE_MARGIN_MS
  const onSignal = (signal: NodeJS.Signals): void => {
    setTimeout(() => fail(`close did not finish within ${deadlineMs} ms after ${signal}; exiting`), deadlineMs).unref()
    const open = sseOf(app).size
    app.log.info(`tower: ${signal}: ending ${open} open stream${open === 1 ? '' : 's'} and stopping`)
    // Nothing else holds the event loop once closed, so the process then exits with code 0 —
    // but a worker's IPC channel to the cluster primary does: let it go once the close is done.
    app.close().then(() => { if (cluster.isWorker) process.disconnect() }, (err: Error) => fail(`close failed: ${err.message}`))
  }
  // once: a second Ctrl-C gets Node's default handling and ends the process at once.
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
}

async function main (): Promise<void> {
  const config = parseConfig(process.argv.slice(2), process.env)
  if (config.help) {
    process.stdout.write(usage())
    return
  }
  if (config.workers > 1 && cluster.isPrimary) {
    // Workers run with the same flags: the primary warns once for all of them.
    for (const warning of config.warnings) process.stdout.write(`tower: warning: ${warning}\n`)
    runPrimary({ workers: config.workers, stopWithinMs: config.limits.drainMs + CLOSE_MARGIN_MS * 2, say: (line) => process.stdout.write(`${line}\n`), fail })
    return
  }
  const pretty = loadPinoPretty()
  const app = buildTower({
    logger: towerLogger(chooseLogFormat(config.logFormat, process.stdout.isTTY === true, process.env.NODE_ENV, pretty !== null), pretty),
    sse: config.sse,
    allowedHosts: config.allowedHosts,
    token: config.token,
    requestTimeoutMs: config.requestTimeoutMs,
    trustProxy: config.trustProxy
  })
  if (cluster.isPrimary) for (const warning of config.warnings) app.log.warn(`tower: ${warning}`)
  const limits = describeLimits(config.limits)
  // The URL may carry passwords; the start-up line shows where, never them.
  // Read from the normalised options: with a redis.* flag, `sse.redis` is a group ({ url, key, … }), not the URL.
  const connection = config.limits.redis?.connection
  const bus = typeof connection === 'string' ? `bus ${redactRedisUrl(connection)}` : 'bus memory'
  const guard = `hosts ${[...new Set([...DEFAULT_ALLOWED_HOSTS, ...config.allowedHosts])].join(' ')}, ` +
    `token ${config.token === undefined ? 'off' : 'required for notify'}, requestTimeoutMs ${config.requestTimeoutMs}, ${describeTrustProxy(config.trustProxy)}`
  try {
    await app.listen({
      host: config.host,
      port: config.port,
      // Fastify's own "listening" log line, made the one start-up line with the limits in force.
      listenTextResolver: (address) => `tower: listening on ${address}, events at ${config.limits.path}; ${bus}; ${guard}; ${limits}`
    })
  } catch (err) {
    fail(listenFailure(err as NodeJS.ErrnoException, config))
  }
  closeOnSignal(app, config.limits.drainMs)
}

// A configuration mistake is the user's to fix: one line. Anything else is a bug: keep its stack.
main().catch((err: Error) => fail(err instanceof TowerConfigError ? err.message : String(err.stack)))
