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

t.test('the README is the short one, and its quick start registers the plugin as the package test runs it', async (t) => {
  const text = readFileSync(path.join(ROOT, README), 'utf8')
  const lines = text.split('\n').length
  t.ok(lines <= 350, `README.md: ${lines} lines, at most 350`)
  for (const command of ['npm install && npm start', 'sh scripts/test-deps.sh && npm ci && npm test']) {
    t.ok(text.includes(`\n${command} `), `the command at the top: ${command}`)
  }
  const { tokens } = await readPage(README)
  const start = tokens.findIndex((token, i) => token.type === 'heading_open' && tokens[i + 1].content === 'Quick start')
  const code = tokens.slice(start).find((token) => token.type === 'fence')?.content ?? ''
  const register = /^await app\.register\(towerSse, \{\n[\s\S]*?^\}\)$/m.exec(code)?.[0]
  t.ok(register, 'the quick start registers the plugin')
  const example = readFileSync(path.join(ROOT, 'test', 'fixtures', 'package', 'example.mjs'), 'utf8')
  t.ok(register !== undefined && example.includes(register), 'test/fixtures/package/example.mjs registers it the same way')
})

t.test('the README\'s "Use it in your app" example type-checks (strict) and runs: 401 for anyone else, per-user topics, CORS, a per-request stream', async (t) => {
  const { tokens } = await readPage(README)
  const start = tokens.findIndex((token, i) => token.type === 'heading_open' && tokens[i + 1].content === 'Use it in your app')
  // The app, then testing it with tower-sse/testing: one program.
  const [appCode, testing] = tokens.slice(start).filter((token) => token.type === 'fence').slice(0, 2).map((token) => token.content)
  const code = `${appCode}${testing}`
  t.match(code, /eventStream: true/)
  t.match(testing, /injectStream/)
  const dir = path.join(ROOT, 'test-artifacts')
  mkdirSync(dir, { recursive: true })
  const source = code.replace("from 'tower-sse'", "from '../lib'").replace("from 'tower-sse/testing'", "from '../lib/testing'")
  // As written (top-level await: an ES module), strict.
  const checked = path.join(dir, 'readme-app-check.ts')
  writeFileSync(checked, source)
  // In a child without coverage (test/fixtures/type-check.mjs): the example's own errors, against lib/'s types.
  const options = { strict: true, noEmit: true, target: 'es2022', module: 'es2022', moduleResolution: 'bundler', esModuleInterop: true, skipLibCheck: true }
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(__dirname, 'fixtures', 'type-check.mjs'), checked, JSON.stringify(options)], { env: TOOL_ENV })
  t.same(JSON.parse(stdout), [], 'no type error')
  // Run: the same body in a function (the loader here is CommonJS), listening on a free port.
  const lines = source.replace(/^declare module[\s\S]*?^}\n/m, '').replace('port: 4100', 'port: 0').split('\n')
  const imports = lines.filter((line) => line.startsWith('import '))
  const body = lines.filter((line) => !line.startsWith('import '))
  const runnable = path.join(dir, 'readme-app-run.ts')
  writeFileSync(runnable, `${imports.join('\n')}\nexport async function run () {\n${body.join('\n')}\nreturn { app, event }\n}\n`)
  const { run } = require(runnable) as { run: () => Promise<{ app: import('fastify').FastifyInstance, event: { data: string } }> }
  const { app, event } = await run()
  t.teardown(() => app.close())
  const port = (app.server.address() as import('node:net').AddressInfo).port
  const anonymous = await connect(port, '/api/me/events')
  t.equal(event.data, 'for alice', 'the README\'s injectStream read her event')
  t.same([app.sse.stats().accepted, app.sse.size], [1, 0], 'and its close() freed the slot')
  t.equal(anonymous.status, 401, 'the app\'s own 401')
  const alice = await connect(port, '/api/me/events', { authorization: 'Bearer alice-token', origin: 'https://app.example' })
  t.equal(alice.status, 200)
  t.equal(alice.headers['access-control-allow-origin'], 'https://app.example')
  t.equal(alice.headers['access-control-allow-credentials'], 'true')
  await app.sse.broadcast('for bob', { topic: 'user:bob' })
  await app.sse.broadcast('for alice', { topic: 'user:alice' })
  t.equal((await alice.nextEvent(0)).data, 'for alice', 'only her own topic')
  const job = await connect(port, '/api/jobs/7/log', { authorization: 'Bearer alice-token' })
  t.equal(job.status, 200)
  const logged = await job.nextEvent(0)
  t.same([logged.event, logged.data, logged.id], ['log', 'job 7: started', undefined], 'the per-request stream\'s own event')
  t.equal(app.sse.size, 2, 'both routes on one registry')
  t.same(alice.events.map((e) => e.data), ['for alice'], 'and the other stream never saw it')
  alice.destroy()
  job.destroy()
})

t.test('benchmarks/README.md counts the benchmarks and has a row for each npm run bench:* script', async (t) => {
  const page = readFileSync(path.join(ROOT, 'benchmarks', 'README.md'), 'utf8')
  const scripts = Object.keys((JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts)
    .filter((name) => name.startsWith('bench:') && name !== 'bench:build')
  const words = ['One', 'Two', 'Three', 'Four', 'Five', 'Six', 'Seven', 'Eight', 'Nine', 'Ten']
  t.match(page, new RegExp(`^${words[scripts.length - 1]} benchmarks,`, 'm'), `${scripts.length} bench scripts`)
  t.same(scripts.filter((name) => !page.includes(`| \`npm run ${name}\` |`)), [], 'each has its row in the table')
})
