import type { RedisConnection } from './connection'

type Callback = (error: Error | null, reply?: unknown) => void
/** A command ioredis's defineCommand added, called with its arguments and, last, a callback. */
type DefinedCommand = (...args: unknown[]) => unknown

interface Queued {
  args: ReadonlyArray<string | number>
  resolve: (reply: unknown) => void
  reject: (error: Error) => void
}

/**
 * Sends the publishes of one turn of the event loop to Redis in one pipeline: one write and one
 * read of replies for the whole turn instead of one of each per publish. Redis runs the calls in
 * the order they were made, each as its own script run (its own deadline, idempotency key and
 * sequence number), and each caller is answered with its own call's outcome: a call Redis refuses
 * (a ReplyError) fails alone, the others of the pipeline stand.
 *
 * The turn ends at `setImmediate`, as for the write coalescer (lib/streams/write-coalescer.ts):
 * publishes from separate callbacks of one poll phase (notify requests parsed together) join too.
 * `maxBatch` 1 sends every call at once, on its own.
 */
export class PublishBatch {
  private queued: Queued[] = []

  constructor (private readonly connection: RedisConnection, private readonly command: string, private readonly maxBatch: number) {}

  /** Runs the command with `args` in this turn's pipeline; settles with its own reply or error. */
  call (args: ReadonlyArray<string | number>): Promise<unknown> {
    if (this.maxBatch === 1) return this.send(args)
    return new Promise((resolve, reject) => {
      if (this.queued.length === 0) setImmediate(this.flush)
      this.queued.push({ args, resolve, reject })
    })
  }

  private send (args: ReadonlyArray<string | number>): Promise<unknown> {
    return (this.commandOf(this.connection) as (...a: Array<string | number>) => Promise<unknown>)(...args)
  }

  private commandOf (target: object): DefinedCommand {
    return (target as Record<string, DefinedCommand>)[this.command].bind(target)
  }

  private readonly flush = (): void => {
    const queued = this.queued
    this.queued = []
    for (let from = 0; from < queued.length; from += this.maxBatch) {
      const part = queued.slice(from, from + this.maxBatch)
      if (part.length === 1) {
        this.send(part[0].args).then(part[0].resolve, part[0].reject)
        continue
      }
      const pipeline = this.connection.pipeline()
      const command = this.commandOf(pipeline)
      for (const { args, resolve, reject } of part) {
        const done: Callback = (error, reply) => {
          if (error != null) reject(error)
          else resolve(reply)
        }
        command(...args, done)
      }
      // A pipeline refused as a whole answers no call: each caller not answered yet gets its error.
      pipeline.exec().catch((error: Error) => {
        for (const { reject } of part) reject(error)
      })
    }
  }
}
