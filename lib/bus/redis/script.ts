/**
 * The bus's one script, run atomically by Redis (ioredis defineCommand: EVALSHA, EVAL on NOSCRIPT).
 *
 * The meta hash holds the epoch (`e`), the epoch's last sequence number (`s`), the stream id of the
 * epoch's start marker (`m`) and the run_id of the server that last vouched for it (`r`). Every
 * entry carries its epoch and a contiguous per-epoch sequence number, so a reader or a history read
 * sees any hole (trim past a cursor, XDEL, a lost tail) as a jump in `n`. A new epoch starts with a
 * marker entry (`n` 0); when it replaces an epoch because the server changed, it names that epoch
 * and its last sequence number (`p`, `q`), so a reader that had delivered exactly up to `q` knows
 * it lost nothing (the new server holds a prefix of the old history, never other events).
 *
 * A new epoch is made when the meta hash is gone (flush, restart without persistence, eviction),
 * when the caller is connected to a server of another run_id that cannot prove it lost nothing
 * (restart without `appendfsync always`, failover), or on request ('rotate') when the caller saw a
 * rollback and the epoch is still the one it saw.
 *
 * KEYS: stream, meta, idempotency key (the meta key again when unused).
 * ARGV: mode ('pub' | 'check' | 'rotate' | 'dry'), proposed epoch (for 'dry': the probe key), caller's run_id, lossless ('1'/'0'),
 *   MAXLEN (approximate), deadline in Redis ms ('0': none), idempotency (the event's hash, '0': none), its TTL ms,
 *   the epoch to rotate away from, then the entry's field/value pairs.
 * Returns { 'late' } (past the deadline: nothing written), { 'dup', id } (the key's first publish),
 * { 'conflict' } (the key's first publish had another hash: nothing written),
 * { 'ok', epoch, stream id, seq } (published), { 'meta', epoch, seq, marker id } (check, rotate),
 * or { 'dry', refused command… } (dry: changes nothing).
 */
export const BUS_SCRIPT = `
local stream, meta, mode = KEYS[1], KEYS[2], ARGV[1]
if mode == 'dry' then
  -- The dry run (ARGV[2]: the probe key): which commands the bus runs would this user be refused?
  local refused = { 'dry' }
  if not redis.acl_check_cmd then return refused end
  local probe = ARGV[2]
  local checks = {
    { 'XADD', stream, 'MAXLEN', '~', '1000', '*', 'e', '' }, { 'XREAD', 'STREAMS', stream, '0' },
    { 'XRANGE', stream, '-', '+' }, { 'XREVRANGE', stream, '+', '-' },
    { 'HSET', meta, 'e', '' }, { 'HMGET', meta, 'e' }, { 'HINCRBY', meta, 's', '1' },
    { 'GET', KEYS[3] }, { 'SET', KEYS[3], '', 'PX', '1' },
    { 'XADD', probe, 'MAXLEN', '1', '*', 't', '' }, { 'PEXPIRE', probe, '1' }, { 'XREAD', 'STREAMS', probe, '0' },
    { 'MULTI' }, { 'EXEC' }, { 'TIME' }, { 'INFO', 'server' }
  }
  for _, c in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(c)) then refused[#refused + 1] = c[1] .. (c[2] and (' ' .. c[2]) or '') end
  end
  return refused
end
if mode == 'pub' then
  local deadline = tonumber(ARGV[6])
  if deadline > 0 then
    local t = redis.call('TIME')
    if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > deadline then return { 'late' } end
  end
  if ARGV[7] ~= '0' then
    -- The key's value: the event's hash, a space, the first publish's id.
    local prior = redis.call('GET', KEYS[3])
    if prior then
      local space = string.find(prior, ' ', 1, true)
      if not space then return { 'dup', prior } end
      if string.sub(prior, 1, space - 1) ~= ARGV[7] then return { 'conflict' } end
      return { 'dup', string.sub(prior, space + 1) }
    end
  end
end
local function rotate (previous, previousSeq)
  local marker = { 'e', ARGV[2], 'n', '0' }
  if previous then
    marker[5], marker[6], marker[7], marker[8] = 'p', previous, 'q', previousSeq
  end
  local id = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[5], '*', unpack(marker))
  redis.call('HSET', meta, 'e', ARGV[2], 's', '0', 'm', id, 'r', ARGV[3])
  return ARGV[2]
end
local current = redis.call('HMGET', meta, 'e', 's', 'r')
local epoch = current[1]
if not epoch then
  epoch = rotate(false, false)
elseif mode == 'rotate' and epoch == ARGV[9] then
  -- A rollback was seen: sequence numbers may have been reused, so the marker vouches for nothing.
  epoch = rotate(false, false)
elseif current[3] ~= ARGV[3] then
  if ARGV[4] == '1' then redis.call('HSET', meta, 'r', ARGV[3]) else epoch = rotate(epoch, current[2]) end
end
if mode ~= 'pub' then
  local now = redis.call('HMGET', meta, 'e', 's', 'm')
  return { 'meta', now[1], now[2], now[3] }
end
local seq = redis.call('HINCRBY', meta, 's', 1)
local fields = { 'e', epoch, 'n', tostring(seq) }
for i = 10, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[5], '*', unpack(fields))
if ARGV[7] ~= '0' then redis.call('SET', KEYS[3], ARGV[7] .. ' ' .. epoch .. '-' .. id, 'PX', ARGV[8]) end
return { 'ok', epoch, id, tostring(seq) }
`
