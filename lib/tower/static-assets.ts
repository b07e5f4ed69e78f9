import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import type { FastifyPluginCallback, FastifyReply } from 'fastify'
import { FindMyWay } from './router'
import { TOWER_ROUTES } from './routes'

// lib/tower (tests) and dist/tower (npm start, the package) are both two levels below the package
// root; the build copies public/ next to dist/tower/ (scripts/build.mjs).
const PACKAGE_ROOT = path.resolve(__dirname, '..', '..')
export const PUBLIC_DIR = path.join(__dirname, 'public')
// The client's browser build keeps lib/'s layout (client/ and the shared/ modules it imports), and
// so do the URLs: /vendor/tower-sse-client/ and /vendor/shared/ side by side, so '../shared/x.js' resolves.
export const CLIENT_ESM_DIR = path.join(PACKAGE_ROOT, 'dist', 'client-esm', 'client')
export const CLIENT_ESM_SHARED_DIR = path.join(PACKAGE_ROOT, 'dist', 'client-esm', 'shared')
export const CLIENT_ESM_FILE = path.join(CLIENT_ESM_DIR, 'index.js')
/** The modules of the client's browser build (lib/client/*.ts), served side by side so their relative imports resolve. */
export const CLIENT_ESM_MODULES: ReadonlySet<string> = new Set(['index.js', 'events.js', 'options.js', 'policy.js', 'tabs.js', 'wire.js'])
/** The lib/shared/ modules the client's browser build imports. */
export const CLIENT_ESM_SHARED_MODULES: ReadonlySet<string> = new Set(['backoff.js', 'describe.js'])
const CLIENT_ESM_MISSING = 'the browser build of tower-sse/client (dist/client-esm/) is missing: run npm run build'

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml'
}

function packageFile (name: string, ...rest: string[]): string {
  return path.join(path.dirname(require.resolve(`${name}/package.json`)), ...rest)
}

// The package ships uPlot's browser files beside dist/tower (uPlot is no dependency of the
// plugin); from source they come from the uplot devDependency.
const BUNDLED_UPLOT = path.join(__dirname, 'vendor', 'uplot')
const UPLOT_DIR = existsSync(BUNDLED_UPLOT) ? BUNDLED_UPLOT : packageFile('uplot', 'dist')

/** The browser modules the dashboard imports, each from a fixed file: nothing else under /vendor/. */
const VENDOR_FILES: Readonly<Record<string, { file: string, missing: string }>> = {
  'eventsource-parser.js': {
    file: packageFile('eventsource-parser', 'dist', 'index.js'),
    missing: 'eventsource-parser is not installed (run npm install)'
  },
  'uplot.js': { file: path.join(UPLOT_DIR, 'uPlot.esm.js'), missing: 'uplot is not installed (run npm install)' },
  'uplot.css': { file: path.join(UPLOT_DIR, 'uPlot.min.css'), missing: 'uplot is not installed (run npm install)' }
}

// One path segment, no leading dot: no traversal, no dotfiles, nothing outside public/.
const PUBLIC_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/

/** The names each parametric route answers with a file; any other name is a 404. */
const SERVED: Readonly<Record<'vendor' | 'vendorClient' | 'vendorShared' | 'asset', (name: string) => boolean>> = {
  vendor: (name) => Object.hasOwn(VENDOR_FILES, name),
  vendorClient: (name) => CLIENT_ESM_MODULES.has(name),
  vendorShared: (name) => CLIENT_ESM_SHARED_MODULES.has(name),
  asset: (name) => PUBLIC_NAME.test(name) && Object.hasOwn(CONTENT_TYPES, path.extname(name))
}

/**
 * The Tower route a stream at `streamPath` would hide a file of, or null. A static path beats a
 * parametric one in Fastify's router, so `/dashboard.js` is no route clash, yet the stream would
 * be served instead of the file: the path is refused at start-up instead.
 */
export function shadowedFileRoute (streamPath: string): string | null {
  const router = FindMyWay()
  for (const key of Object.keys(SERVED) as Array<keyof typeof SERVED>) router.on('GET', TOWER_ROUTES[key], () => {}, { key })
  const found = router.find('GET', streamPath)
  if (found === null) return null
  const { key } = found.store as { key: keyof typeof SERVED }
  return SERVED[key](found.params.name ?? '') ? TOWER_ROUTES[key] : null
}

async function sendFile (reply: FastifyReply, file: string, missing: string): Promise<FastifyReply> {
  let content: Buffer
  try {
    content = await readFile(file)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code !== 'ENOENT' && code !== 'EISDIR') throw err
    return reply.code(404).send({ statusCode: 404, error: 'Not Found', message: missing })
  }
  return reply
    .type(CONTENT_TYPES[path.extname(file)])
    .header('cache-control', 'no-cache')
    .header('x-content-type-options', 'nosniff')
    .send(content)
}

/** GET / (the dashboard), GET /<file> from lib/tower/public/, GET /vendor/<module>, GET /vendor/tower-sse-client/<module>, GET /vendor/shared/<module>. */
export const staticAssets: FastifyPluginCallback = (fastify, _options, done) => {
  fastify.get(TOWER_ROUTES.dashboard, (_request, reply) =>
    sendFile(reply, path.join(PUBLIC_DIR, 'index.html'), 'the dashboard page lib/tower/public/index.html is missing'))

  fastify.get<{ Params: { name: string } }>(TOWER_ROUTES.vendor, (request, reply) => {
    if (!SERVED.vendor(request.params.name)) return reply.callNotFound()
    const vendor = VENDOR_FILES[request.params.name]
    return sendFile(reply, vendor.file, vendor.missing)
  })

  fastify.get<{ Params: { name: string } }>(TOWER_ROUTES.vendorClient, (request, reply) => {
    if (!SERVED.vendorClient(request.params.name)) return reply.callNotFound()
    return sendFile(reply, path.join(CLIENT_ESM_DIR, request.params.name), CLIENT_ESM_MISSING)
  })

  fastify.get<{ Params: { name: string } }>(TOWER_ROUTES.vendorShared, (request, reply) => {
    if (!SERVED.vendorShared(request.params.name)) return reply.callNotFound()
    return sendFile(reply, path.join(CLIENT_ESM_SHARED_DIR, request.params.name), CLIENT_ESM_MISSING)
  })

  fastify.get<{ Params: { name: string } }>(TOWER_ROUTES.asset, (request, reply) => {
    const { name } = request.params
    if (!SERVED.asset(name)) return reply.callNotFound()
    return sendFile(reply, path.join(PUBLIC_DIR, name), `no file ${name} in the dashboard's assets`)
  })
  done()
}
