/**
 * A refused value as an error message shows it, for the plugin's and the client's option errors
 * alike (compiled into the client's browser build too, so it imports nothing).
 */
export function describe (value: unknown): string {
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'bigint') return `${value}n`
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}
