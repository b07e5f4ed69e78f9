// A certificate authority of the test's own and a server certificate it signed for 127.0.0.1
// (an IP subject alternative name, which Node's TLS checks), made with the openssl CLI in a
// temporary folder: what a Redis over TLS serves and what a client that trusts it is given.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'

export interface TlsCertificates {
  dir: string
  /** The CA's certificate (PEM): what a client trusts (`NODE_EXTRA_CA_CERTS`, ioredis `tls.ca`). */
  ca: string
  /** The server's certificate and key (PEM files). */
  cert: string
  key: string
  remove: () => void
}

const DAYS = '2'

export async function makeTlsCertificates (): Promise<TlsCertificates> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tower-sse-tls-'))
  const file = (name: string): string => path.join(dir, name)
  const openssl = async (...args: string[]): Promise<void> => { await promisify(execFile)('openssl', args, { cwd: dir, timeout: 20_000 }) }
  try {
    await openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', file('ca.key'), '-out', file('ca.pem'), '-days', DAYS, '-subj', '/CN=tower-sse test CA')
    await openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', file('server.key'), '-out', file('server.csr'), '-subj', '/CN=127.0.0.1')
    fs.writeFileSync(file('server.ext'), 'subjectAltName=IP:127.0.0.1\n')
    await openssl('x509', '-req', '-in', file('server.csr'), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-CAcreateserial',
      '-out', file('server.pem'), '-days', DAYS, '-extfile', file('server.ext'))
  } catch (error) {
    fs.rmSync(dir, { recursive: true, force: true })
    throw error
  }
  return { dir, ca: file('ca.pem'), cert: file('server.pem'), key: file('server.key'), remove: () => fs.rmSync(dir, { recursive: true, force: true }) }
}
