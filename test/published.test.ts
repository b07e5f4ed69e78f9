// The package as the registry shows it and a user installs it (test/fixtures/packed.ts): the
// manifest links back to the repository; every relative link of the packed README and docs lands on a
// file inside the tarball; the tower bin prints its usage; tower-sse/client is the ESM build for
// `import` and the CommonJS one for `require`, in Node and in TypeScript under NodeNext
// (skipLibCheck off). Named apart from package.test.ts and the packed-types files so that the suite
// (tap takes files in name order, two at a time) does not run two npm installs side by side.
import { execFile } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import MarkdownIt from 'markdown-it'
import t from 'tap'
import { packAndInstall } from './fixtures/packed'

const run = promisify(execFile)
const TSC = require.resolve('typescript/bin/tsc')

/** Every link and image of a Markdown page that is neither a URL nor an anchor of the page itself. */
function relativeLinks (text: string): Array<{ line: number, href: string }> {
  const links: Array<{ line: number, href: string }> = []
  for (const token of new MarkdownIt({ html: true }).parse(text, {})) {
    if (token.type !== 'inline') continue
    for (const child of token.children ?? []) {
      const href = child.type === 'link_open' ? child.attrGet('href') : child.type === 'image' ? child.attrGet('src') : null
      if (href === null || /^[a-z][a-z0-9+.-]*:/i.test(href) || href.startsWith('#')) continue
      links.push({ line: (token.map?.[0] ?? 0) + 1, href })
    }
  }
  return links
}

t.test('npm pack + install: what the registry shows and what a user imports', async (t) => {
  // The files below are written to a directory of this test's own inside the project that installed the tarball.
  const { project, dir: app, files } = await packAndInstall(t)
  const installed = path.join(project, 'node_modules', 'tower-sse')
  const shipped = new Set(files)

  t.test('package.json links to the repository, its home page and its issues', async (t) => {
    const manifest = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8'))
    t.match(manifest.repository, { type: 'git', url: /^git\+https:\/\/github\.com\/[\w.-]+\/[\w.-]+\.git$/ })
    t.match(manifest.homepage, /^https:\/\/github\.com\/[\w.-]+\/[\w.-]+#readme$/)
    t.match(manifest.bugs, { url: /^https:\/\/github\.com\/[\w.-]+\/[\w.-]+\/issues$/ })
    const repo = /github\.com\/([\w.-]+\/[\w.-]+?)\.git$/.exec(manifest.repository.url)?.[1]
    t.ok(manifest.homepage.includes(`github.com/${repo}#`) && manifest.bugs.url.includes(`github.com/${repo}/`), 'all three name the same repository')
  })

  t.test('every relative link of the packed README.md and docs/*.md is a file inside the tarball', async (t) => {
    const pages = files.filter((f) => f === 'README.md' || /^docs\/[^/]+\.md$/.test(f))
    t.ok(pages.includes('README.md') && pages.includes('docs/README.md') && pages.length > 10, `the pages are shipped: ${pages.length}`)
    const checked: string[] = []
    const missing: string[] = []
    for (const page of pages) {
      for (const { line, href } of relativeLinks(readFileSync(path.join(installed, page), 'utf8'))) {
        const target = path.posix.normalize(path.posix.join(path.posix.dirname(page), decodeURIComponent(href.split('#')[0])))
        // A link to a folder (GitHub lists it) resolves when the tarball holds files under it.
        const found = shipped.has(target) || (href.split('#')[0].endsWith('/') && files.some((f) => f.startsWith(target.replace(/\/?$/, '/'))))
        checked.push(target)
        if (!found) missing.push(`${page}:${line}: ${href} (${target})`)
      }
    }
    t.ok(checked.length > 50, `links checked: ${checked.length}`)
    t.ok(checked.includes('benchmarks/README.md') && checked.some((f) => f.startsWith('benchmarks/results/')), 'the benchmarks\' pages among them')
    t.same(missing, [], 'none points to a file the tarball lacks')
  })

  t.test('node_modules/.bin/tower --help prints the usage', async (t) => {
    const { stdout } = await run(path.join(project, 'node_modules', '.bin', 'tower'), ['--help'], { cwd: app })
    t.match(stdout, /^Usage: tower \[options\]/)
  })

  t.test('tower-sse/client: `import` from an .mjs file gets the ESM build, `require` from CommonJS the CommonJS one', async (t) => {
    writeFileSync(path.join(app, 'client-import.mjs'), [
      "import { TowerSseClient, CLIENT_DEFAULTS } from 'tower-sse/client'",
      "const client = new TowerSseClient('http://127.0.0.1:1/api/events', { retryMs: 3000 })",
      'client.close()',
      "console.log(JSON.stringify({ resolved: import.meta.resolve('tower-sse/client'), type: typeof TowerSseClient, state: client.readyState, closed: TowerSseClient.CLOSED, defaults: typeof CLIENT_DEFAULTS }))"
    ].join('\n'))
    writeFileSync(path.join(app, 'client-require.cjs'), [
      "const { TowerSseClient, CLIENT_DEFAULTS } = require('tower-sse/client')",
      "const client = new TowerSseClient('http://127.0.0.1:1/api/events', { retryMs: 3000 })",
      'client.close()',
      "console.log(JSON.stringify({ resolved: require.resolve('tower-sse/client'), type: typeof TowerSseClient, state: client.readyState, closed: TowerSseClient.CLOSED, defaults: typeof CLIENT_DEFAULTS }))"
    ].join('\n'))
    const esm = JSON.parse((await run(process.execPath, ['client-import.mjs'], { cwd: app })).stdout)
    t.match(esm, { resolved: /\/node_modules\/tower-sse\/dist\/client-esm\/client\/index\.js$/, type: 'function', defaults: 'object' })
    t.equal(esm.state, esm.closed, 'a client made and closed')
    const cjs = JSON.parse((await run(process.execPath, ['client-require.cjs'], { cwd: app })).stdout)
    t.match(cjs, { resolved: /\/node_modules\/tower-sse\/dist\/client\/index\.js$/, type: 'function', defaults: 'object' })
    t.equal(cjs.state, cjs.closed)
  })

  t.test('TypeScript under NodeNext (skipLibCheck off): an .mts import gets the ESM build\'s types, a .cts require the CommonJS build\'s', async (t) => {
    writeFileSync(path.join(app, 'client.mts'), [
      "import { TowerSseClient, type TowerSseClientOptions } from 'tower-sse/client'",
      'const options: TowerSseClientOptions = { retryMs: 3000 }',
      "export const client: TowerSseClient = new TowerSseClient('http://127.0.0.1:4100/api/events', options)",
      '// @ts-expect-error the URL is a string or a URL: types that collapsed to `any` would compile this',
      'export const wrong = new TowerSseClient(42)'
    ].join('\n'))
    writeFileSync(path.join(app, 'client.cts'), [
      "import client = require('tower-sse/client')",
      "export const made: client.TowerSseClient = new client.TowerSseClient(new URL('http://127.0.0.1:4100/api/events'))",
      '// @ts-expect-error as above',
      'export const wrong = new client.TowerSseClient(42)'
    ].join('\n'))
    const compiled = await run(process.execPath, [TSC, '--strict', '--noEmit', '--skipLibCheck', 'false', '--target', 'es2022', '--lib', 'es2022,dom',
      '--module', 'nodenext', '--moduleResolution', 'nodenext', '--listFiles', 'client.mts', 'client.cts'], { cwd: app })
      .then(({ stdout }) => ({ errors: '', stdout }), (err: { stdout: string }) => ({ errors: err.stdout, stdout: err.stdout }))
    t.equal(compiled.errors, '', 'no error')
    const read = compiled.stdout.split('\n').map((f) => path.relative(installed, f.trim())).filter((f) => !f.startsWith('..'))
    t.ok(read.includes(path.join('dist', 'client-esm', 'client', 'index.d.ts')), 'the .mts file reads dist/client-esm\'s types')
    t.ok(read.includes(path.join('dist', 'client', 'index.d.ts')), 'the .cts file reads dist/client\'s')
  })
})
