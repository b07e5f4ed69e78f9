// TypeScript as users compile it, against the packed tarball (NodeNext ESM and bundler): the README's quick
// start and the client, with skipLibCheck off and no optional peer installed. The other settings
// are in compile-packed-cjs.test.ts and resolve-node10-types.test.ts (see test/fixtures/package-types.ts).
import t from 'tap'
import { compilesUnder, SETTINGS } from './fixtures/package-types'

t.test('the packed types compile in a user\'s project', (t) => compilesUnder(t, [SETTINGS[0], SETTINGS[2]]))
