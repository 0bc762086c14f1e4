-- Write lock release (Redisson RReadWriteLock write unlock, with the unlock latch). Keys,
-- arguments and reply: lua.WriteRelease (calls.go).
-- At the last write hold the lock is freed, or stays in read mode if the owner holds reads
-- (a downgrade); either way every waiter is told, so that readers can enter (Redisson stays
-- silent on a downgrade). Freeing the lock drops the waiting writers' claims, so that the
-- readers woken get their turn before the next writer (which claims again as it attempts):
-- writers taking turns cannot keep readers out. Safe to repeat (see release).
return release(KEYS[1], KEYS[3], ARGV[5], ARGV[3], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[2]), 1,
    function()
        if redis.call('hlen', KEYS[1]) == 1 then
            redis.call('del', KEYS[1], KEYS[4])
        else
            redis.call('hset', KEYS[1], 'mode', 'read')
        end
        redis.call(ARGV[4], KEYS[2], ARGV[1])
        return 1
    end,
    function()
        if not redis.call('hget', KEYS[1], 'mode') then -- gone already: waiters are told, as Redisson does
            redis.call(ARGV[4], KEYS[2], ARGV[1])
        end
    end)
