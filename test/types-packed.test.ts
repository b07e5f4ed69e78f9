// TypeScript as users compile it, against the packed tarball: the README's quick start and the
// client under NodeNext ESM, Node16 CommonJS (and // @ts-check JavaScript), bundler and node10
// (typesVersions for tower-sse/client), with skipLibCheck off and no optional peer installed (see
// test/fixtures/package-types.ts).
import t from 'tap'
import { compilesUnder } from './fixtures/package-types'

t.test('the packed types compile in a user\'s project', (t) => compilesUnder(t))
