import t from 'tap'
import { Redis } from 'ioredis'
import { ReceiveProof, PROBE_EVERY_MS } from '../lib/bus/redis/receive-proof'
import { RECEIVE_DEADLINE_MS, Watchdog } from '../lib/bus/redis/watchdog'
import { server } from './fixtures/bus-instances'

// The Redis bus's watch on itself, by its own clock (moved by hand here, never slept): the receive
// probe's cadence (issue 31: a healed connection proves it receives within 250 ms, while a
// connection that is fine is not probed faster than once a second), its deadline restarted
// after an out-of-memory spell, and the deaf spell told once, not on every 250 ms watch.

const PROBE_AGAIN_MS = 250

/** A clock that moves only when the test moves it, in whole milliseconds (sums of fractions would miss a boundary by a rounding). */
function handClock (): { now: () => number, skip: (ms: number) => void } {
  let nowMs = 1_000_000
  return { now: () => nowMs, skip: (ms) => { nowMs += ms } }
}

t.test('the receive probe: once a second while its last one is seen, every 250 ms while it is not, one at a time', async (t) => {
  const redis = await server(t)
  const publisher = new Redis(redis.url)
  t.teardown(() => publisher.disconnect())
  const clock = handClock()
  const written: Array<Error | null> = []
  const proof = new ReceiveProof('{watch}:probe:test', clock.now, (error) => written.push(error))
  /** What the probe sent by now: a command issued after it on the same connection is answered after it. */
  const sent = async (): Promise<number> => {
    await publisher.ping()
    // The probe's own reactions to its answer run before the next turn.
    await new Promise((resolve) => setImmediate(resolve))
    return written.length
  }
  /** The bus's reader reading the probe stream: the probes written since its cursor are seen. */
  const read = async (): Promise<void> => {
    const reply = await publisher.xread('STREAMS', proof.key, proof.cursor) as Array<[string, Array<[string, string[]]>]> | null
    proof.saw(reply?.[0][1] ?? [])
  }
  const at = (): number => clock.now()
  const start = at()

  proof.restart()
  proof.send(publisher)
  t.equal(await sent(), 1, 'the first probe goes at once')
  await read()
  t.equal(proof.silentMs(), 0, 'seen: receiving is proven as of its sending')
  clock.skip(PROBE_AGAIN_MS + 50)
  proof.send(publisher)
  t.equal(await sent(), 1, 'fine: no probe 300 ms after the last')
  clock.skip(PROBE_EVERY_MS - PROBE_AGAIN_MS - 51)
  proof.send(publisher)
  t.equal(await sent(), 1, 'nor 999 ms after it')
  clock.skip(1)
  proof.send(publisher)
  clock.skip(PROBE_EVERY_MS)
  proof.send(publisher)
  t.equal(await sent(), 2, 'the next one a second after the last, and one at a time: none while it is in flight')

  // The reader does not see it (a connection that leads nowhere): silence grows past a second.
  t.equal(proof.silentMs(), at() - start, 'unseen: silent since the first')
  t.ok(proof.silentMs() > PROBE_EVERY_MS)
  proof.send(publisher)
  t.equal(await sent(), 3, 'silent for over a second: probed again at once')
  clock.skip(PROBE_AGAIN_MS - 1)
  proof.send(publisher)
  t.equal(await sent(), 3, 'not within 250 ms of the last')
  clock.skip(1)
  proof.send(publisher)
  t.equal(await sent(), 4, 'every 250 ms while unseen: a healed connection proves itself within 250 ms')
  t.same(written, [null, null, null, null], 'Redis took every probe')

  // Healed: the reader sees the newest probe (one entry kept), sent 250 ms after the third.
  await read()
  t.equal(proof.silentMs(), 0, 'proven again as of the newest probe')
  clock.skip(PROBE_AGAIN_MS)
  proof.send(publisher)
  t.equal(await sent(), 4, 'fine again: back to once a second')
})

t.test('restart(): receiving counts as proven from now (the reader starts, an out-of-memory spell ends)', async (t) => {
  const clock = handClock()
  const proof = new ReceiveProof('{watch}:probe:restart', clock.now)
  clock.skip(RECEIVE_DEADLINE_MS * 4)
  t.equal(proof.silentMs(), RECEIVE_DEADLINE_MS * 4, 'no probe seen: silent since it was made')
  proof.restart()
  t.equal(proof.silentMs(), 0, 'restarted: its deadline runs from now')
  clock.skip(100)
  t.equal(proof.silentMs(), 100)
})

t.test('a deaf spell is told once: the close pass comes again only after another whole spell of silence', async (t) => {
  const clock = handClock()
  const deafCloseMs = 5000
  const watchdog = new Watchdog({ now: Date.now, monotonic: clock.now }, deafCloseMs, () => {})
  const spell = RECEIVE_DEADLINE_MS + deafCloseMs
  let silent = spell
  t.equal(watchdog.deafSpellOver(silent), false, 'silent for exactly the spell: not yet')
  const passes: number[] = []
  // Watched every 250 ms for three spells' worth of silence.
  for (let watched = 0; watched < 3 * spell; watched += PROBE_AGAIN_MS) {
    clock.skip(PROBE_AGAIN_MS)
    silent += PROBE_AGAIN_MS
    if (watchdog.deafSpellOver(silent)) passes.push(watched)
  }
  t.same(passes, [0, spell, 2 * spell], 'one close pass per spell of silence, not one per watch')
  t.equal(watchdog.deafSpellOver(0), false, 'heard again: no pass')
})
