// TypeScript as users compile it, against the packed tarball (node10 resolution: typesVersions for
// tower-sse/client): the README's quick start and the client, with skipLibCheck off and no optional
// peer installed. The other settings are in compile-packed-cjs.test.ts and types-packed-esm.test.ts
// (see test/fixtures/package-types.ts).
import t from 'tap'
import { compilesUnder, SETTINGS } from './fixtures/package-types'

t.test('the packed types compile in a user\'s project', (t) => compilesUnder(t, [SETTINGS[3]]))
