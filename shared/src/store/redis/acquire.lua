-- Acquire an idempotency record, in one atomic step: the transition `state::acquire` (the rules
-- `IdempotencyRecord::is_replaceable` and `carries_attempts_to`), as the DynamoDB backend's
-- condition expressions state it. The backend suite checks it against `state::table`.
--
-- KEYS[1]  the record's hash
-- ARGV[1]  now, epoch milliseconds      ARGV[2]  now, epoch seconds
-- ARGV[3]  expiry, epoch seconds        ARGV[4]  lease end, epoch milliseconds
-- ARGV[5]  payload hash                 ARGV[6]  owner token
-- ARGV[7]  when the server drops the record (PEXPIREAT), epoch milliseconds
--
-- Returns {1, attempts} when the record was written ({1, 0, hash} when it replaced a live record
-- of another payload, with that one's hash), {0, {field, value, ...}} with the stored
-- record when it was not (a live record, or one this script cannot read: the caller reports it).
local key = KEYS[1]
local now_ms, now_s, hash = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[5]
local stored = redis.call('HGETALL', key)
local attempts, last_error, replaced = 0, false, false
if #stored > 0 then
  local r = {}
  for i = 1, #stored, 2 do
    r[stored[i]] = stored[i + 1]
  end
  local expires_at = tonumber(r['expiration'])
  local lease = tonumber(r['in_progress_expiration'])
  local status = r['status']
  if expires_at == nil or (r['in_progress_expiration'] ~= nil and lease == nil)
    or not (status == 'IN_PROGRESS' or status == 'COMPLETED' or status == 'FAILED') then
    return {0, stored}
  end
  -- Held while an attempt's lease lasts; a record without a lease, until it expires.
  local held = r['status'] == 'IN_PROGRESS'
    and ((lease ~= nil and lease >= now_ms) or (lease == nil and expires_at >= now_s))
  local expired = expires_at < now_s
  -- Replaceable: not held, and expired or not completed (whatever its payload).
  if held or not (expired or status ~= 'COMPLETED') then
    return {0, stored}
  end
  -- The same payload's failed attempts and last error carry over; an expired record's, or
  -- another payload's (a corrected message), start again.
  if not expired and r['payload_hash'] == hash then
    attempts = tonumber(r['attempts']) or 0
    last_error = r['last_error'] or false
  elseif not expired then
    replaced = r['payload_hash'] or ''
  end
  redis.call('DEL', key)
end
redis.call('HSET', key,
  'status', 'IN_PROGRESS',
  'expiration', ARGV[3],
  'in_progress_expiration', ARGV[4],
  'payload_hash', hash,
  'owner', ARGV[6],
  'attempts', tostring(attempts))
if last_error then
  redis.call('HSET', key, 'last_error', last_error)
end
redis.call('PEXPIREAT', key, ARGV[7])
if replaced then
  return {1, attempts, replaced}
end
return {1, attempts}
