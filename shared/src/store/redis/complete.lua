-- Mark a record completed (`state::update` with `Update::Complete`), fenced (fenced.lua,
-- prepended): only while it is in progress and carries the caller's owner token.
--
-- KEYS[1]  the record's hash
-- ARGV[1]  owner token                  ARGV[2]  new expiry, epoch seconds
-- ARGV[3]  when the server drops the record (PEXPIREAT), epoch milliseconds
-- ARGV[4]  '1' when a result existed but was too large to store, else '0'
-- ARGV[5]  the result (JSON), when one is stored
--
-- Returns {1, attempts} when applied (or applied already by an earlier try of this call: the
-- record is completed and carries the caller's token), {0} when not.
local key = KEYS[1]
if applied_by(key, ARGV[1], 'COMPLETED') then
  return {1, tonumber(redis.call('HGET', key, 'attempts')) or 0}
end
if not held_by(key, ARGV[1]) then
  return {0}
end
redis.call('HSET', key, 'status', 'COMPLETED', 'expiration', ARGV[2])
if ARGV[4] == '1' then
  redis.call('HSET', key, 'result_omitted', '1')
else
  redis.call('HDEL', key, 'result_omitted')
end
if #ARGV >= 5 then
  redis.call('HSET', key, 'data', ARGV[5])
else
  redis.call('HDEL', key, 'data')
end
redis.call('PEXPIREAT', key, ARGV[3])
return {1, tonumber(redis.call('HGET', key, 'attempts')) or 0}
