/** The parts of a V8 .cpuprofile (Profiler.stop) that a self-time summary reads. */
export interface CpuProfile {
  nodes: Array<{ id: number, callFrame: { functionName: string, url: string, lineNumber: number } }>
  samples: number[]
  timeDeltas: number[]
}

export interface FrameTime {
  /** `function file:line`, or a V8 pseudo-frame such as (garbage collector). */
  frame: string
  selfMs: number
  /** Share of the busy (non-idle) samples. */
  selfPct: number
}

/** Where a script lives, shortened: `node:net`, `fastify/lib/reply.js`, `lib/registry.js`. */
export function shortUrl (url: string): string {
  if (url === '') return ''
  const inModules = url.lastIndexOf('node_modules/')
  if (inModules !== -1) return url.slice(inModules + 'node_modules/'.length)
  const inRepo = /\/(lib|benchmarks)\/.*$/.exec(url)
  return inRepo !== null ? inRepo[0].slice(1) : url.replace(/^file:\/\//, '')
}

/** The package or area a script belongs to, for a coarser split of the same time. */
export function areaOf (url: string): string {
  if (url.startsWith('node:')) return 'node core'
  const parts = shortUrl(url).split('/')
  if (url.includes('node_modules/') && parts[0].startsWith('@')) return `${parts[0]}/${parts[1]}`
  return parts[0]
}

/** Self time by key over the busy samples, largest first. */
function selfTimes (profile: CpuProfile, keyOf: (node: CpuProfile['nodes'][number]) => string, count: number): FrameTime[] {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const totals = new Map<string, number>()
  let busyUs = 0
  profile.samples.forEach((id, i) => {
    const node = byId.get(id)
    if (node === undefined || node.callFrame.functionName === '(idle)') return
    const us = profile.timeDeltas[i] ?? 0
    busyUs += us
    const key = keyOf(node)
    totals.set(key, (totals.get(key) ?? 0) + us)
  })
  return [...totals]
    .sort((a, b) => b[1] - a[1])
    .slice(0, count)
    .map(([frame, us]) => ({ frame, selfMs: Number((us / 1000).toFixed(1)), selfPct: Number((us / busyUs * 100).toFixed(1)) }))
}

/** The `count` functions with the most self time. */
export function topFrames (profile: CpuProfile, count = 15): FrameTime[] {
  return selfTimes(profile, ({ callFrame: f }) => {
    const where = shortUrl(f.url)
    return `${f.functionName === '' ? '(anonymous)' : f.functionName}${where === '' ? '' : ` ${where}:${f.lineNumber + 1}`}`
  }, count)
}

/** Self time by area: node core, each package, the repository's own code; V8's own frames by name. */
export function areas (profile: CpuProfile): FrameTime[] {
  return selfTimes(profile, ({ callFrame: f }) => f.url === '' ? f.functionName : areaOf(f.url), 12)
}
