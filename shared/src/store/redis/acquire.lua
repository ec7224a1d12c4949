-- Acquire an idempotency record, in one atomic step: the rule of `Record::is_replaceable_by`,
-- as the DynamoDB backend's condition expression states it.
--
-- KEYS[1]  the record's hash
-- ARGV[1]  now, epoch milliseconds      ARGV[2]  now, epoch seconds
-- ARGV[3]  expiry, epoch seconds        ARGV[4]  lease end, epoch milliseconds
-- ARGV[5]  payload hash                 ARGV[6]  owner token
-- ARGV[7]  when the server drops the record (PEXPIREAT), epoch milliseconds
--
-- Returns {1, attempts} when the record was written, {0, {field, value, ...}} with the stored
-- record when it was not (a live record, or one this script cannot read: the caller reports it).
local key = KEYS[1]
local now_ms, now_s, hash = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[5]
local stored = redis.call('HGETALL', key)
local attempts, last_error = 0, false
if #stored > 0 then
  local r = {}
  for i = 1, #stored, 2 do
    r[stored[i]] = stored[i + 1]
  end
  local expires_at = tonumber(r['expiration'])
  local lease = tonumber(r['in_progress_expiration'])
  if expires_at == nil or (r['in_progress_expiration'] ~= nil and lease == nil) then
    return {0, stored}
  end
  -- Held while an attempt's lease lasts; a record without a lease, until it expires.
  local held = r['status'] == 'IN_PROGRESS'
    and ((lease ~= nil and lease >= now_ms) or (lease == nil and expires_at >= now_s))
  local expired = expires_at < now_s
  local same_work = r['payload_hash'] == hash
    and (r['status'] == 'IN_PROGRESS' or r['status'] == 'FAILED')
  if held or not (expired or same_work) then
    return {0, stored}
  end
  -- A live record's failed attempts and last error carry over; an expired one's start again.
  if not expired then
    attempts = tonumber(r['attempts']) or 0
    last_error = r['last_error'] or false
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
return {1, attempts}
