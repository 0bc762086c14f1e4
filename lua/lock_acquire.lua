-- Reentrant lock acquire (Redisson RLock, REDISSON-LAYOUT §2.2).
-- KEYS[1] lock hash; KEYS[2], optional: the owner's last unlock latch, done with, to delete.
-- ARGV[1] lease ms, ARGV[2] owner id.
-- Reply: nil when acquired or re-entered (the TTL is reset to the lease),
-- otherwise the holder's PTTL (-1 when the key has no expiry).
if KEYS[2] then
    redis.call('del', KEYS[2])
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
