-- Fair lock force release, whoever holds the lock (Redisson RFairLock forceUnlock); a
-- deleted lock wakes the head waiter. Keys, arguments and reply: lua.FairForceRelease
-- (calls.go).
must_be(KEYS[1], 'hash') -- not a lock: deleting it would destroy someone's value
local head = drop_stale(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[2])) -- the queue stays as it is
if redis.call('del', KEYS[1]) == 1 then
    wake_head(KEYS[2], KEYS[5], ARGV[1], head)
    return 1
end
return 0
