-- Mark a record failed, fenced like complete.lua: one more failed attempt, the error stored.
--
-- KEYS[1]  the record's hash
-- ARGV[1]  owner token                  ARGV[2]  the error message (truncated by the caller)
--
-- Returns {1, attempts after this one} when applied, {0} when not. The expiry stays.
local key = KEYS[1]
local state = redis.call('HMGET', key, 'status', 'owner')
if state[1] ~= 'IN_PROGRESS' or state[2] ~= ARGV[1] then
  return {0}
end
redis.call('HSET', key, 'status', 'FAILED', 'last_error', ARGV[2])
return {1, redis.call('HINCRBY', key, 'attempts', 1)}
