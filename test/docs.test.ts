import { execFile } from 'node:child_process'
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import MarkdownIt from 'markdown-it'
import { connect } from './fixtures/sse-connection'
import { TOOL_ENV } from './fixtures/tool-env'
import t from 'tap'

const ROOT = path.resolve(__dirname, '..')
const README = 'README.md'
/** Every page of the docs, as paths from the repository root. */
const PAGES = [README, 'benchmarks/README.md', ...readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]

const markdown = new MarkdownIt({ html: true })
type Token = ReturnType<MarkdownIt['parse']>[number]

interface Link { from: string, line: number, href: string }

/** The plain text of an inline token, as GitHub reads a heading to make its anchor. */
function plainText (inline: Token): string {
  return (inline.children ?? []).filter((c) => c.type === 'text' || c.type === 'code_inline').map((c) => c.content).join('')
}

async function readPage (page: string): Promise<{ links: Link[], anchors: Set<string>, tokens: Token[] }> {
  // github-slugger is ESM only: the same slugs GitHub gives headings, duplicates numbered.
  const { default: GithubSlugger } = await import('github-slugger')
  const slugger = new GithubSlugger()
  const tokens = markdown.parse(readFileSync(path.join(ROOT, page), 'utf8'), {})
  const links: Link[] = []
  const anchors = new Set<string>()
  tokens.forEach((token, i) => {
    if (token.type === 'heading_open') anchors.add(slugger.slug(plainText(tokens[i + 1])))
    if (token.type !== 'inline') return
    for (const child of token.children ?? []) {
      const href = child.type === 'link_open' ? child.attrGet('href') : child.type === 'image' ? child.attrGet('src') : null
      if (href !== null) links.push({ from: page, line: (token.map?.[0] ?? 0) + 1, href })
    }
  })
  return { links, anchors, tokens }
}

/** Whether a link resolves, and if not, why; `null` when it does. */
function problem (link: Link, pages: Map<string, Set<string>>): string | null {
  if (/^[a-z][a-z0-9+.-]*:/i.test(link.href)) return null // a URL: not ours to check offline
  if (link.href.startsWith('/')) return 'an absolute path resolves on no page host'
  const [target, anchor] = link.href.split('#', 2) as [string, string | undefined]
  const file = target === '' ? link.from : path.posix.normalize(path.posix.join(path.posix.dirname(link.from), decodeURIComponent(target)))
  const stat = statSync(path.join(ROOT, file), { throwIfNoEntry: false })
  if (stat === undefined) return `${file} does not exist`
  if (anchor === undefined) return null
  const anchors = pages.get(file)
  if (anchors === undefined) return `#${anchor} points into ${file}, which is not a docs page`
  return anchors.has(anchor) ? null : `${file} has no heading #${anchor}`
}

t.test('every relative link and #anchor in the README, docs/ and benchmarks/README.md resolves', async (t) => {
  const read = await Promise.all(PAGES.map(async (page) => [page, await readPage(page)] as const))
  const pages = new Map(read.map(([page, { anchors }]) => [page, anchors]))
  const links = read.flatMap(([, page]) => page.links)
  t.ok(links.length > 50, `links found: ${links.length}`)
  const broken = links.map((link) => ({ link, why: problem(link, pages) })).filter((b) => b.why !== null)
  t.same(broken.map(({ link, why }) => `${link.from}:${link.line}: ${link.href}: ${why}`), [], 'no broken link')
})

t.test('every docs page is reachable from the README', async (t) => {
  const read = new Map(await Promise.all(PAGES.map(async (page) => [page, await readPage(page)] as const)))
  const reached = new Set([README])
  const queue = [README]
  for (let page = queue.shift(); page !== undefined; page = queue.shift()) {
    for (const { href } of read.get(page)?.links ?? []) {
      const target = href.split('#')[0]
      if (target === '' || /^[a-z][a-z0-9+.-]*:/i.test(target)) continue
      const file = path.posix.normalize(path.posix.join(path.posix.dirname(page), target))
      if (read.has(file) && !reached.has(file)) {
        reached.add(file)
        queue.push(file)
      }
    }
  }
  t.same(PAGES.filter((page) => !reached.has(page)), [], 'no page only reachable by knowing its path')
})

t.test('the README is read in ten minutes: at most 200 lines, its two commands first, the quick start within the first 40', async (t) => {
  const text = readFileSync(path.join(ROOT, README), 'utf8')
  const lines = text.split('\n')
  t.ok(lines.length <= 200, `README.md: ${lines.length} lines, at most 200`)
  for (const command of ['npm install && npm start', 'sh scripts/test-deps.sh && npm ci && npm test']) {
    t.ok(lines.slice(0, 15).some((line) => line.startsWith(`${command} `)), `the command at the top: ${command}`)
  }
  const quickStart = lines.findIndex((line) => line === '## Quick start')
  t.ok(quickStart >= 0 && quickStart < 40, `the quick start at line ${quickStart + 1}`)
  const { tokens } = await readPage(README)
  const start = tokens.findIndex((token, i) => token.type === 'heading_open' && tokens[i + 1].content === 'Quick start')
  const code = tokens.slice(start).filter((token) => token.type === 'fence' && token.info === 'ts')[0]?.content ?? ''
  const register = /^await app\.register\(towerSse, \{\n[\s\S]*?^\}\)$/m.exec(code)?.[0]
  t.ok(register, 'the quick start registers the plugin')
  const example = readFileSync(path.join(ROOT, 'test', 'fixtures', 'package', 'example.mjs'), 'utf8')
  t.ok(register !== undefined && example.includes(register), 'test/fixtures/package/example.mjs registers it the same way')
})

/** The TypeScript of a page, as programs: a block that starts with an import starts one, a block that does not goes on with the one before. */
async function programs (page: string): Promise<string[]> {
  const { tokens } = await readPage(page)
  const found: string[] = []
  for (const token of tokens) {
    if (token.type !== 'fence' || token.info !== 'ts') continue
    if (token.content.startsWith('import ') || found.length === 0) found.push(token.content)
    else found[found.length - 1] += `\n${token.content}`
  }
  return found
}

/**
 * A program as a file of test-artifacts/, importing the package from lib/ (to run it) or from the
 * build's declarations in dist/ (to type-check it as a user's code is: against the published
 * types, which is also quicker than checking lib/ again).
 */
function asArtifact (name: string, source: string, from: 'lib' | 'dist'): string {
  const dir = path.join(ROOT, 'test-artifacts')
  mkdirSync(dir, { recursive: true })
  const file = path.join(dir, `${name}.ts`)
  const entries = from === 'lib'
    ? { '': '../lib', '/testing': '../lib/testing', '/client': '../lib/client/index.ts', '/mcp': '../lib/mcp' }
    : { '': '../dist/index.js', '/testing': '../dist/testing.js', '/client': '../dist/client/index.js', '/mcp': '../dist/mcp.js' }
  writeFileSync(file, source.replace(/from 'tower-sse(|\/testing|\/client|\/mcp)'/g, (_all, entry: keyof typeof entries) => `from '${entries[entry]}'`))
  return file
}

t.test('every TypeScript block of the README and the docs type-checks, strict, as the page gives it, against the built types', async (t) => {
  const files: string[] = []
  for (const page of PAGES) {
    const found = await programs(page)
    found.forEach((source, i) => files.push(asArtifact(`doc-${page.replace(/[/.]/g, '-')}-${i}`, `${source}\nexport {}\n`, 'dist')))
  }
  t.ok(files.length >= 8, `${files.length} programs`)
  // In a child without coverage (test/fixtures/type-check.mjs): coverage of the compiler costs half as much again.
  const options = { strict: true, noEmit: true, target: 'es2022', module: 'es2022', moduleResolution: 'bundler', esModuleInterop: true, skipLibCheck: true, allowImportingTsExtensions: true, lib: ['es2022', 'dom'] }
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(__dirname, 'fixtures', 'type-check.mjs'), JSON.stringify(options), ...files], { env: TOOL_ENV, maxBuffer: 16 * 1024 * 1024 })
  t.same(JSON.parse(stdout), [], 'no type error')
})

/** Runs a README program: its body in a function returning `app`, listening on a free port. */
async function runReadme (heading: string): Promise<import('fastify').FastifyInstance> {
  const { tokens } = await readPage(README)
  const start = tokens.findIndex((token, i) => token.type === 'heading_open' && tokens[i + 1].content === heading)
  const source = tokens.slice(start).find((token) => token.type === 'fence' && token.info === 'ts')?.content ?? ''
  const lines = source.split('\n')
  const imports = lines.filter((line) => line.startsWith('import '))
  const body = lines.filter((line) => !line.startsWith('import ')).join('\n').replace('port: 4100', 'port: 0')
  const file = asArtifact(`readme-run-${heading.replace(/\W+/g, '-').toLowerCase()}`, `${imports.join('\n')}\nexport async function run () {\n${body}\nreturn app\n}\n`, 'lib')
  const { run } = require(file) as { run: () => Promise<import('fastify').FastifyInstance> }
  const app = await run()
  if (app.server.address() === null) await app.listen({ host: '127.0.0.1', port: 0 })
  return app
}

const portOf = (app: import('fastify').FastifyInstance): number => (app.server.address() as import('node:net').AddressInfo).port

t.test('the README\'s routes example runs: per-user topics, each user\'s own events only', async (t) => {
  const app = await runReadme('Streams in your routes')
  t.teardown(() => app.close())
  const alice = await connect(portOf(app), '/api/me/events', { authorization: 'Bearer alice-token' })
  const other = await connect(portOf(app), '/api/me/events')
  t.same([alice.status, other.status], [200, 200])
  await app.sse.broadcast('for bob', { topic: 'user:bob' })
  await app.sse.broadcast('for alice', { topic: 'user:alice' })
  t.equal((await alice.nextEvent(0)).data, 'for alice', 'only her own topic')
  await app.sse.broadcast('for everyone')
  t.equal((await other.nextEvent(0)).data, 'for everyone', 'and the untopiced ones')
  alice.destroy()
  other.destroy()
})

t.test('the README\'s answer runs: its tokens, then `end`; a resume after a cut gets the rest; then 204', async (t) => {
  const app = await runReadme('Streaming an answer')
  t.teardown(() => app.close())
  const ask = (headers: Record<string, string> = {}): ReturnType<typeof connect> =>
    connect(portOf(app), '/api/answers', { 'content-type': 'application/json', ...headers }, { method: 'POST', body: '{"question":"why"}' })
  const whole = await ask()
  await whole.ended
  t.same(whole.events.map((e) => e.event === 'token' ? e.data : e.event), ['You', 'asked:', 'why', 'end'])
  const resumed = await ask({ 'last-event-id': whole.events[0].id as string })
  await resumed.ended
  t.same(resumed.events.map((e) => e.event === 'token' ? e.data : e.event), ['asked:', 'why', 'end'], 'the rest, once, in order')
  const done = await ask({ 'last-event-id': whole.events.at(-1)?.id as string })
  await done.ended
  t.equal(done.status, 204)
})

t.test('benchmarks/README.md counts the benchmarks and has a row for each npm run bench:* script', async (t) => {
  const page = readFileSync(path.join(ROOT, 'benchmarks', 'README.md'), 'utf8')
  const scripts = Object.keys((JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts)
    .filter((name) => name.startsWith('bench:') && name !== 'bench:build')
  const words = ['One', 'Two', 'Three', 'Four', 'Five', 'Six', 'Seven', 'Eight', 'Nine', 'Ten']
  t.match(page, new RegExp(`^${words[scripts.length - 1]} benchmarks,`, 'm'), `${scripts.length} bench scripts`)
  t.same(scripts.filter((name) => !page.includes(`| \`npm run ${name}\` |`)), [], 'each has its row in the table')
})
