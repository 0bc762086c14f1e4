-- Reentrant lock acquire (Redisson RLock, REDISSON-LAYOUT §2.2), safe to repeat.
-- KEYS[1] lock hash; ARGV[1] lease ms, ARGV[2] owner id, ARGV[3] the holds the owner knows
-- it has (0: a first acquire).
-- Reply: nil when acquired or re-entered; -3 when the owner knows it holds the lock but its
-- field is gone (deleted, expired: nothing changes); otherwise the holder's PTTL (-1 when the
-- key has no expiry).
--
-- The count is set to one above what the owner knows, not incremented, so a repeat of a
-- request whose reply was lost sets the same count, and a hold the owner never learned of is
-- adopted. A lease only grows: the TTL becomes the larger of what is left and the lease, so
-- no run of this script, late or repeated, cuts a hold short. (Redisson resets the TTL to the
-- lease on re-entry; only this owner's holds see the difference.)
local holds = tonumber(ARGV[3])
if redis.call('exists', KEYS[1]) == 0 then
    if holds > 0 then
        return -3
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    if holds > 0 then
        return -3
    end
    return redis.call('pttl', KEYS[1])
end
redis.call('hset', KEYS[1], ARGV[2], holds + 1)
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
end
return nil
