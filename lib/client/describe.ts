/**
 * A refused value as an error message shows it. Shared by the plugin's and the client's option
 * errors; it lives in lib/client/ because the client's browser build can import nothing outside it.
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
