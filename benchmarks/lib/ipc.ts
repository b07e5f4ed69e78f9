import type { ChildProcess } from 'node:child_process'

/** A child's start (a server listening, a population connected) on a busy 2-core machine: a hang guard, not a speed bound. */
export const CHILD_START_TIMEOUT_MS = 30_000
/** Any other request to a child (stats, stop). */
export const CHILD_REQUEST_TIMEOUT_MS = 15_000

/** A request to a child: `type` picks the handler, the rest is its argument. */
export interface IpcRequest {
  type: string
  [field: string]: unknown
}

interface Envelope { id: number, request: IpcRequest }
interface Reply { id: number, ok: boolean, value?: unknown, error?: string }

/**
 * The parent's side of a child process's IPC channel: request/reply with a timeout, rejected
 * at once (naming the child) if the child exits while a reply is due.
 */
export class IpcClient {
  private nextId = 1
  private readonly pending = new Map<number, { resolve: (v: unknown) => void, reject: (e: Error) => void }>()
  private exitReason: string | null = null

  constructor (readonly child: ChildProcess, readonly label: string) {
    child.on('message', (reply: Reply) => {
      const waiter = this.pending.get(reply.id)
      if (waiter === undefined) return
      this.pending.delete(reply.id)
      if (reply.ok) waiter.resolve(reply.value)
      else waiter.reject(new Error(`${label}: ${reply.error ?? 'request failed'}`))
    })
    child.once('exit', (code, signal) => {
      this.exitReason = `${label} exited (code ${code}, signal ${signal})`
      for (const waiter of this.pending.values()) waiter.reject(new Error(this.exitReason))
      this.pending.clear()
    })
  }

  request<T> (request: IpcRequest, timeoutMs: number): Promise<T> {
    if (this.exitReason !== null) return Promise.reject(new Error(this.exitReason))
    const id = this.nextId++
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id)
        reject(new Error(`${this.label}: no reply to "${request.type}" within ${timeoutMs} ms`))
      }, timeoutMs)
      this.pending.set(id, {
        resolve: (value) => { clearTimeout(timer); resolve(value as T) },
        reject: (error) => { clearTimeout(timer); reject(error) }
      })
      const envelope: Envelope = { id, request }
      this.child.send(envelope)
    })
  }

  /** Resolves once the child has exited; kills it with `signal` if it has not after `graceMs`. */
  async exit (graceMs = 2000, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()))
    if (this.child.connected) this.child.disconnect()
    const timer = setTimeout(() => this.child.kill(signal), graceMs)
    await exited
    clearTimeout(timer)
  }
}

export type IpcHandlers = Record<string, (request: IpcRequest) => unknown>

/**
 * The child's side: answers each request with its handler's (awaited) result, or the error's
 * message; exits when the parent goes away, so no benchmark process outlives its runner.
 */
export function serveIpc (who: string, handlers: IpcHandlers): void {
  const send = process.send?.bind(process)
  if (send === undefined) throw new Error(`${who} must be started by its runner with an IPC channel`)
  process.on('message', (envelope: Envelope) => {
    const { id, request } = envelope
    const handler = handlers[request.type]
    const answer = handler === undefined
      ? Promise.reject(new Error(`unknown request "${request.type}"; known: ${Object.keys(handlers).join(', ')}`))
      : Promise.resolve().then(() => handler(request))
    answer.then(
      (value) => send({ id, ok: true, value } satisfies Reply),
      (error: unknown) => send({ id, ok: false, error: error instanceof Error ? error.message : String(error) } satisfies Reply)
    )
  })
  process.once('disconnect', () => process.exit(0))
}
