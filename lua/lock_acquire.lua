-- Reentrant lock acquire (Redisson RLock and RFencedLock; docs/redisson-interop.md), safe to
-- repeat.
-- KEYS[1] lock hash; KEYS[2] the zset of waiting clients and KEYS[3] the listener key (for a
-- waiting acquire, or a fenced lock); KEYS[4] (fenced only) the token counter,
-- redisson_lock_token:{name}; ARGV[1] lease ms, ARGV[2] owner id, ARGV[3] the holds the owner
-- knows it has (0: a first acquire); ARGV[4] to ARGV[7] for a waiting acquire: the client's
-- token, how long its registration lasts (ms), 1 if the client has other waiters on the lock,
-- and the publish command.
-- Reply: nil when acquired or re-entered; -3 when the owner knows it holds the lock but its
-- field is gone (deleted, expired: nothing changes); otherwise the holder's PTTL (-1 when the
-- key has no expiry), and a waiting acquire registers its client (see wait_here) and gets
-- the PTTL in a one-element array when its client is the listener (see listen). A waiting
-- acquire that takes the lock drops its client's registration, and its listening when it
-- has no other waiter (see resign).
--
-- A fenced lock's acquire and re-entry increment the token, as Redisson's do, and reply
-- {-1, token} instead of nil. A repeat increments it again: a token is only ever the
-- newest, never reused, which is all fencing needs.
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
