import t from 'tap'
import { proxyContract } from './fixtures/proxy-contract'

// Debian's haproxy, started from examples/proxies/ in front of Tower (scripts/test-deps.sh installs it).
proxyContract(t, 'haproxy', {
  refusalTimeWait: { client: 0, server: 20 },
  holdsSlotUntilWrite: false,
  gzipsStream: false
})
