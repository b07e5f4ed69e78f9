import fs from 'node:fs'
import t from 'tap'
import { Redis } from 'ioredis'
import { freePort } from '../benchmarks/lib/free-port'
import { RedisCluster } from '../benchmarks/lib/redis-cluster'
import { launchRedisProcess, stopRedisProcess } from '../benchmarks/lib/redis-server'
import { makeTlsCertificates } from '../benchmarks/lib/tls-certificates'
import { startApp } from './fixtures/app'
import { connect, waitFor } from './fixtures/sse-connection'
import { notify } from './fixtures/tower'
import { runCli } from './fixtures/tower-cli'

// The Redis bus over TLS (issue 31, items 7 and 8), with a certificate signed by a CA of the
// test's own: a server serving TLS only, and a Redis Cluster whose every node does (the cluster
// bus and replication too). Trusted, the bus runs over it; untrusted, start-up says so in one line.
// Tower on a rediss+cluster:// URL trusts the CA through NODE_EXTRA_CA_CERTS, as an operator would.

t.test('one server over TLS: an ioredis client trusting the CA runs the bus; a rediss:// URL it does not trust is refused naming the certificate', async (t) => {
  const certificates = await makeTlsCertificates()
  t.teardown(() => certificates.remove())
  const port = await freePort()
  const child = await launchRedisProcess(['--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--tls-cert-file', certificates.cert, '--tls-key-file', certificates.key, '--tls-ca-cert-file', certificates.ca, '--tls-auth-clients', 'no'])
  t.teardown(() => stopRedisProcess(child))

  const client = new Redis({ host: '127.0.0.1', port, tls: { ca: fs.readFileSync(certificates.ca) }, lazyConnect: true })
  t.teardown(() => client.disconnect())
  const { app } = await startApp({ redis: { client, key: 'tls' } })
  t.teardown(() => app.close())
  t.match(await app.sse.broadcast({ n: 1 }), { id: String }, 'published over TLS')
  t.equal(app.sse.stats().bus.state, 'up')

  // Refused, not crashed: ioredis ends a socket whose TLS handshake failed with no listener left,
  // and the server's alert in answer was an uncaught exception (the bus disconnects quietly).
  const refused = await startApp({ redis: { url: `rediss://127.0.0.1:${port}`, key: 'tls' } }).then(() => null, (error: Error) => error.message)
  t.match(refused, `cannot start the Redis bus on rediss://127.0.0.1:${port}: the server's TLS certificate is not trusted here (SELF_SIGNED_CERT_IN_CHAIN`)
})

t.test('Tower on rediss+cluster://: with the CA trusted, notify reaches the stream over TLS; without it, start-up names the certificate', async (t) => {
  const certificates = await makeTlsCertificates()
  t.teardown(() => certificates.remove())
  const cluster = await RedisCluster.start({ tls: certificates })
  t.teardown(() => cluster.stop())
  t.match(cluster.url, /^rediss\+cluster:\/\//)

  const cli = runCli(['--redis', cluster.url, '--redis-key', 'tls'], { PORT: '0', NODE_EXTRA_CA_CERTS: certificates.ca }, { built: true })
  t.teardown(() => cli.child.kill('SIGKILL'))
  const line = await cli.line(/tower: listening on/)
  const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+),/.exec(line)?.[1])
  const stream = await connect(port)
  t.teardown(() => stream.destroy())
  await stream.nextEvent(0)
  t.equal((await notify(port, { type: 'ci', title: 'over TLS', body: '' })).status, 200)
  await waitFor('the event on the stream', () => stream.events.length === 2, 15_000)
  t.match(JSON.parse(stream.events[1].data), { title: 'over TLS' })
  const slot = await cluster.slotOf('{tls}:stream')
  const entries = await cluster.command(await cluster.ownerOf(slot), 'XRANGE', '{tls}:stream', '-', '+') as Array<[string, string[]]>
  t.ok(entries.some(([, fields]) => fields.some((field) => field.includes('over TLS'))), 'the event is in the cluster, written over TLS')

  const untrusting = runCli(['--redis', cluster.url, '--redis-key', 'tls'], { PORT: '0' }, { built: true })
  t.teardown(() => untrusting.child.kill('SIGKILL'))
  const { code } = await untrusting.exited
  t.not(code, 0, 'a Tower that does not trust the certificate does not start')
  t.match(untrusting.stderr(), /no node of the cluster answered: the server's TLS certificate is not trusted here \(SELF_SIGNED_CERT_IN_CHAIN: .*NODE_EXTRA_CA_CERTS/,
    `and says it is the certificate, in one line: ${untrusting.stderr().trim()}`)
  t.equal(untrusting.stderr().trim().split('\n').length, 1)
})
