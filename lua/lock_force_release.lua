-- Force release, whoever holds the lock (Redisson RLock forceUnlock); a deleted lock wakes
-- the next waiting client and Redisson's waiters (see wake_next). Keys, arguments and reply:
-- lua.LockForceRelease (calls.go).
must_be(KEYS[1], 'hash') -- not a lock: deleting it would destroy someone's value
if redis.call('del', KEYS[1]) == 1 then
    wake_next(KEYS[3], KEYS[2], ARGV[1])
    return 1
end
return 0
