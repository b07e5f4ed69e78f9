import { createHash } from 'node:crypto'

/**
 * Publish in one atomic step: the stream's epoch (created now if Redis lost it, from the caller's
 * fresh proposal) is stamped into the entry by the same script that adds it, so no entry of a new
 * stream can carry the epoch of a lost one.
 * KEYS: stream, epoch. ARGV: proposed epoch, MAXLEN (approximate), then field/value pairs.
 * Returns { epoch, stream id }.
 */
export const PUBLISH_SCRIPT = `
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[1]
  redis.call('SET', KEYS[2], epoch)
end
local fields = { 'e', epoch }
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(fields))
return { epoch, id }
`

export const PUBLISH_SCRIPT_SHA = createHash('sha1').update(PUBLISH_SCRIPT).digest('hex')
