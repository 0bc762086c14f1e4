-- Reentrant lock acquire (Redisson RLock, REDISSON-LAYOUT §2.2).
-- KEYS[1] lock hash; KEYS[2..], optional: unlock latches whose marks to raise first.
-- ARGV[1] lease ms, ARGV[2] owner id, ARGV[3] the holds the owner knows it has;
-- with latches: ARGV[4] the latch PX ms, and ARGV[3+i] the number to raise KEYS[i]'s mark to
-- (requests of unknown outcome: the owner's own unlock or undo, or a hand-off settlement).
-- Reply: nil when acquired or re-entered (the TTL is reset to the lease),
-- otherwise the holder's PTTL (-1 when the key has no expiry).
--
-- The count is set to one above what the owner knows rather than incremented (Redisson's
-- HINCRBY, with the same result whenever the two agree): a hold whose outcome the owner
-- never learned (a lost reply that could not be undone) is adopted by this acquisition
-- instead of staying in Redis as a hold nobody will release.
--
-- A request whose outcome the owner never learned may still reach Redis late and release
-- what this acquisition takes. Raising its latch's mark to its number first makes such a
-- run a stale duplicate, which changes nothing (see lock_release.lua).
for i = 2, #KEYS do
    local n = tonumber(ARGV[3 + i])
    local last = tonumber(redis.call('get', KEYS[i]))
    if not last or math.abs(last) < n then
        redis.call('set', KEYS[i], n, 'px', ARGV[4])
    end
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hset', KEYS[1], ARGV[2], tonumber(ARGV[3]) + 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
