/** Where progress goes: stderr, or anything that takes text. */
export interface ProgressOut {
  isTTY?: boolean
  write: (text: string) => unknown
}

/** The status line while the benchmark runs: rewritten in place on a terminal, one line per step otherwise. */
export class Progress {
  private readonly startedAt = Date.now()
  private step = 0
  private label = ''

  constructor (private readonly steps: number, private readonly out: ProgressOut = process.stderr) {}

  /** Starts the next step. */
  next (label: string): void {
    this.step++
    this.label = label
    if (this.out.isTTY === true) this.show('')
    else this.out.write(this.line('') + '\n')
  }

  /** Updates the current step's detail (terminal only). */
  detail (text: string): void {
    if (this.out.isTTY === true) this.show(text)
  }

  /** A message of its own, above the status line. */
  note (text: string): void {
    this.out.write(this.out.isTTY === true ? `\r\x1b[K${text}\n` : `${text}\n`)
    if (this.out.isTTY === true && this.step > 0) this.show('')
  }

  finish (): void {
    if (this.out.isTTY === true) this.out.write('\r\x1b[K')
  }

  private show (detail: string): void {
    this.out.write(`\r\x1b[K${this.line(detail)}`)
  }

  private line (detail: string): string {
    const seconds = Math.round((Date.now() - this.startedAt) / 1000)
    const elapsed = `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, '0')}`
    return `[${this.step}/${this.steps} ${elapsed}] ${this.label}${detail === '' ? '' : ' ' + detail}`
  }
}
