-- Mark a record failed (`state::update` with `Update::Fail`), fenced (fenced.lua, prepended):
-- one more failed attempt when counted, the error stored.
--
-- KEYS[1]  the record's hash
-- ARGV[1]  owner token                  ARGV[2]  the error message (truncated by the caller)
-- ARGV[3]  the attempts to add: 1, or 0 for a failure that is not counted (`counted: false`)
--
-- Returns {1, attempts after this one} when applied (or applied already by an earlier try of this
-- call: the record is failed and carries the caller's token), {0} when not. The expiry stays.
local key = KEYS[1]
if applied_by(key, ARGV[1], 'FAILED') then
  return {1, tonumber(redis.call('HGET', key, 'attempts')) or 0}
end
if not held_by(key, ARGV[1]) then
  return {0}
end
redis.call('HSET', key, 'status', 'FAILED', 'last_error', ARGV[2])
return {1, redis.call('HINCRBY', key, 'attempts', tonumber(ARGV[3]))}
