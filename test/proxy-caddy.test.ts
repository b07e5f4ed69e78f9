import t from 'tap'
import { proxyContract } from './fixtures/proxy-contract'

// Debian's caddy, started from examples/proxies/ in front of Tower (scripts/test-deps.sh installs it).
proxyContract(t, 'caddy', {
  refusalTimeWait: { client: 0, server: 20 },
  holdsSlotUntilWrite: true,
  gzipsStream: false
})
