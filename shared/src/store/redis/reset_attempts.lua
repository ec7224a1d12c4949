-- Set a failed record's attempts back to 0 (`state::update` with `Update::ResetAttempts`: its
-- message went to the dead-letter queue). Applies only to a failed record; the last error and
-- the expiry stay.
--
-- KEYS[1]  the record's hash
--
-- Returns {1, 0} when applied, {0} when not.
local key = KEYS[1]
if redis.call('HGET', key, 'status') ~= 'FAILED' then
  return {0}
end
redis.call('HSET', key, 'attempts', '0')
return {1, 0}
