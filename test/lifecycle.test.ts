import { createHook } from 'node:async_hooks'
import path from 'node:path'
import t from 'tap'
import { startApp } from './fixtures/app'
import { connect, waitFor } from './fixtures/sse-connection'

const LIB_DIR = path.resolve(__dirname, '..', 'lib') + path.sep

t.test('close() with 200 open streams ends them all and resolves promptly', async (t) => {
  const { app, port } = await startApp({ maxClients: 200 })
  const conns = await Promise.all(Array.from({ length: 200 }, () => connect(port)))
  t.equal(conns.filter((c) => c.status === 200).length, 200)
  const started = process.hrtime.bigint()
  // Without the preClose hook this would wait forever on open streams; the bound only catches a hang.
  const closed = await Promise.race([
    app.close().then(() => true),
    new Promise<false>((resolve) => setTimeout(() => resolve(false), 5000).unref())
  ])
  const ms = Number(process.hrtime.bigint() - started) / 1e6
  t.ok(closed, 'close() resolved')
  await Promise.all(conns.map((c) => c.ended))
  t.equal(app.sse.size, 0)
  t.equal(app.sse.stats().shutdown, 200, 'every stream was ended by the server at shutdown')
  t.comment(`close() with 200 streams took ${ms.toFixed(1)} ms`)
})

t.test('every timer the plugin starts is gone after close()', async (t) => {
  // Track Timeout resources created while the app lives; an interval left running is never destroyed.
  const live = new Map<number, string>()
  let tracking = true
  const hook = createHook({
    init (asyncId, type, _trigger, resource) {
      // Only timers started from the plugin's own code: Node's http keeps an internal Date cache timer.
      if (tracking && type === 'Timeout' && String(new Error().stack).includes(LIB_DIR)) live.set(asyncId, String((resource as { _onTimeout?: unknown })._onTimeout).slice(0, 120))
    },
    destroy (asyncId) { live.delete(asyncId) }
  }).enable()
  const { app, port } = await startApp({ heartbeatMs: 20, logIntervalMs: 20, maxAgeMs: 10_000 })
  const c = await connect(port)
  await waitFor('the heartbeat, log and expiry timers to be running', () => live.size >= 3)
  t.ok(live.size >= 3, `heartbeat, log and expiry timers were running (${live.size})`)
  await app.close()
  await c.ended
  tracking = false
  // A cleared timer's destroy hook runs soon after, not at once: wait for it, boundedly.
  await waitFor('every plugin timer to be destroyed after close()', () => live.size === 0, 2000).catch(() => {})
  hook.disable()
  t.same([...live.values()], [], 'no timer outlives close()')
})
