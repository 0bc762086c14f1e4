-- Reentrant lock acquire (Redisson RLock and RFencedLock; docs/redisson-interop.md), safe to
-- repeat. Keys, arguments and reply: lua.LockAcquire (calls.go).
-- A waiting acquire registers its client (see wait_here), and learns whether its client is
-- the listener (see listen). A waiting acquire that takes the lock drops its client's
-- registration, and its listening when it has no other waiter (see resign).
--
-- A fenced lock's acquire and re-entry increment the token, as Redisson's do. A repeat
-- increments it again: a token is only ever the newest, never reused, which is all fencing
-- needs.
--
-- The count is set to one above what the owner knows (see reenter). (Redisson increments it,
-- and resets the TTL to the lease on re-entry; only this owner's holds see the difference.)
local function taken()
    if KEYS[4] then
        return { -1, redis.call('incr', KEYS[4]) }
    end
    return nil
end
local lease = tonumber(ARGV[1])
local r = reenter(KEYS[1], ARGV[2], tonumber(ARGV[3]), lease)
if r == -3 then
    return -3
elseif r then
    return taken()
end
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], lease)
    if ARGV[4] then
        -- No wake for this client until it waits again: its release registers it again if
        -- it still has waiters.
        redis.call('zrem', KEYS[2], ARGV[4])
        if ARGV[6] ~= '1' then
            resign(KEYS[3], ARGV[4], KEYS[2], ARGV[7], tonumber(ARGV[5]))
        end
    end
    return taken()
end
if ARGV[4] then
    wait_here(KEYS[2], ARGV[4], tonumber(ARGV[5]))
    if listen(KEYS[3], ARGV[4], tonumber(ARGV[5])) then
        return { redis.call('pttl', KEYS[1]) }
    end
end
return redis.call('pttl', KEYS[1])
