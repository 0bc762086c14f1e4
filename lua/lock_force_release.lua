-- Force release, whoever holds the lock (Redisson RLock forceUnlock, §2.5).
-- KEYS[1] lock hash, KEYS[2] lock channel; ARGV[1] unlock message (0), ARGV[2] publish command.
-- Reply: 1 when a lock was deleted (and waiters told), 0 when there was none.
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
