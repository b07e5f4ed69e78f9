import net from 'node:net'
import t from 'tap'
import { startFaultRelay } from '../benchmarks/lib/fault-relay'
import { waitFor } from './fixtures/sse-connection'

// The bench's fault relay (benchmarks/lib/fault-relay.ts) on its own, against a plain TCP sink on
// loopback: what a chaos row relies on beyond what the bus tests use.

t.test('a delay lifted mid-stream does not reorder the bytes: what was held leaves first', async (t) => {
  let got = ''
  const sink = net.createServer((socket) => { socket.setEncoding('latin1').on('data', (chunk: string) => { got += chunk }) })
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { sink.close() })
  const relay = await startFaultRelay((sink.address() as net.AddressInfo).port)
  t.teardown(() => relay.close())
  const client = net.connect(Number(new URL(relay.url).port), '127.0.0.1')
  t.teardown(() => { client.destroy() })
  await new Promise((resolve) => client.once('connect', resolve))
  relay.delay(300, 0)
  client.write('first,')
  await waitFor('the relay to hold the first chunk', () => [...relay.connections].some((c) => c.sent === 'first,'))
  relay.delay(0, 0)
  client.write('second')
  await waitFor('both chunks at the sink', () => got.length >= 'first,second'.length, 10_000)
  t.equal(got, 'first,second')
  t.ok([...relay.connections].every((c) => /^127\.0\.0\.1:\d+$/.test(c.redisSide)), 'each connection names its upstream\'s address as the server sees it')
})
