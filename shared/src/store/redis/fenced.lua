-- Prepended to complete.lua and fail.lua: the fencing rule of the transition `state::update` for
-- `Update::Complete` and `Update::Fail` (`IdempotencyRecord::is_owned_by`), as the DynamoDB
-- backend states it ("#status = :in_progress AND #owner = :owner").

-- True while the record of `key` is in progress and carries `owner`'s token.
local function held_by(key, owner)
  local state = redis.call('HMGET', key, 'status', 'owner')
  return state[1] == 'IN_PROGRESS' and state[2] == owner
end


-- True when the record of `key` is in `status` and carries `owner`'s token: an earlier try of the
-- same completion or failure was applied (`state::IdempotencyRecord::shows_applied`).
local function applied_by(key, owner, status)
  local state = redis.call('HMGET', key, 'status', 'owner')
  return state[1] == status and state[2] == owner
end
