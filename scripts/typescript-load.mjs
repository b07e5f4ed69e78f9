// Module hook for scripts/typescript-hooks.mjs: a .ts file is CommonJS, so Node's CommonJS loader
// reads it, through the require hook that transforms it.
export async function load (url, context, nextLoad) {
  if (url.startsWith('file:') && url.endsWith('.ts')) return { format: 'commonjs', shortCircuit: true }
  return nextLoad(url, context)
}
