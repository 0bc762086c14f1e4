-- Fair lock force release, whoever holds the lock (Redisson RFairLock forceUnlock).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] latchkey waiters' leases,
-- KEYS[5] the lock channel; ARGV[1] publish command, ARGV[2] now (epoch ms).
-- Reply: 1 when a lock was deleted (and passed to the head waiter), 0 when there was none.
must_be(KEYS[1], 'hash') -- not a lock: deleting it would destroy someone's value
local head = drop_stale(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[2])) -- the queue stays as it is
if redis.call('del', KEYS[1]) == 1 then
    hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], head)
    return 1
end
return 0
