-- Reentrant lock acquire (Redisson RLock, REDISSON-LAYOUT §2.2, and RFencedLock, §8), safe to
-- repeat.
-- KEYS[1] lock hash, KEYS[2] (waiting or fenced) the zset of waiting clients, KEYS[3] (fenced
-- only) the token counter, redisson_lock_token:{name}; ARGV[1] lease ms,
-- ARGV[2] owner id, ARGV[3] the holds the owner knows it has (0: a first acquire);
-- ARGV[4], ARGV[5], for a waiting acquire: the client's token and how long its registration
-- lasts (ms).
-- Reply: nil when acquired or re-entered; -3 when the owner knows it holds the lock but its
-- field is gone (deleted, expired: nothing changes); otherwise the holder's PTTL (-1 when the
-- key has no expiry), and a waiting acquire registers its client (see wait_here) and gets
-- the PTTL in a one-element array when the holder is not a latchkey client (see foreign); a
-- waiting acquire that takes the lock drops its client's registration.
--
-- A fenced lock's acquire and re-entry increment the token, as Redisson's do, and reply
-- {-1, token} instead of nil. A repeat increments it again: a token is only ever the
-- newest, never reused, which is all fencing needs.
--
-- The count is set to one above what the owner knows (see reenter). (Redisson increments it,
-- and resets the TTL to the lease on re-entry; only this owner's holds see the difference.)
local function taken()
    if KEYS[3] then
        return { -1, redis.call('incr', KEYS[3]) }
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
    end
    return taken()
end
if ARGV[4] then
    wait_here(KEYS[2], ARGV[4], tonumber(ARGV[5]))
    if foreign(KEYS[1]) then
        return { redis.call('pttl', KEYS[1]) }
    end
end
return redis.call('pttl', KEYS[1])
