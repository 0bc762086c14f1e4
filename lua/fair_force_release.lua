-- Fair lock force release, whoever holds the lock (Redisson RFairLock forceUnlock, §3.7).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] the lock channel;
-- ARGV[1] unlock message (0), ARGV[2] publish command, ARGV[3] now (epoch ms).
-- Reply: 1 when a lock was deleted (and the head waiter told), 0 when there was none.
drop_stale(KEYS[2], KEYS[3], tonumber(ARGV[3]))
if redis.call('del', KEYS[1]) == 1 then
    wake_head(KEYS[2], KEYS[4], ARGV[2], ARGV[1])
    return 1
end
return 0
