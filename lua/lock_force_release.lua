-- Force release, whoever holds the lock (Redisson RLock forceUnlock).
-- KEYS[1] lock hash, KEYS[2] lock channel, KEYS[3] the zset of waiting clients; ARGV[1]
-- publish command.
-- Reply: 1 when a lock was deleted (and the next waiting client and Redisson's waiters told: see
-- wake_next), 0 when there was none.
must_be(KEYS[1], 'hash') -- not a lock: deleting it would destroy someone's value
if redis.call('del', KEYS[1]) == 1 then
    wake_next(KEYS[3], KEYS[2], ARGV[1])
    return 1
end
return 0
