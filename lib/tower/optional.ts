/**
 * A package Tower uses when it is installed and does without otherwise (prom-client for /metrics,
 * pino-pretty for readable lines: neither is installed by `npm install tower-sse`), or null
 * where it is not. Any other failure to load it is a real error and is thrown.
 */
export function requireOptional<T> (name: string): T | null {
  try {
    return require(name) as T
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' && (err as Error).message.includes(`'${name}'`)) return null
    throw err
  }
}
