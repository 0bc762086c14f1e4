-- Reentrant lock release (Redisson RLock unlock with unlock latch), with an optional local
-- hand-off (a latchkey addition that writes only Redisson's layout). Keys, arguments and
-- reply: lua.LockRelease (calls.go).
-- Freed, the releasing client registers again, last, if it has waiters left — and so is
-- woken if no other client waits — and the next waiting client and Redisson's waiters are
-- told (see wake_next). Handed to the heir, the lock is held by it once with its own lease,
-- and nothing is published (the lock was never free); the client's registration goes if it
-- has no other waiter. A client with no waiter left stops listening (see resign). Safe to
-- repeat (see release).
local freed = 1
if ARGV[10] then
    freed = 2
end
return release(KEYS[1], KEYS[3], ARGV[4], ARGV[2], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[1]), freed,
    function()
        -- the owner's field was the hash's only one: the key went with it
        if ARGV[10] then
            redis.call('hset', KEYS[1], ARGV[10], 1)
            redis.call('pexpire', KEYS[1], ARGV[11])
            -- With no other waiter in its client, the heir took the client's turn, as a
            -- waiting acquire that takes does; the lock stays with the client, whose next
            -- release sees every waiter it has then.
            if ARGV[8] ~= '1' then
                redis.call('zrem', KEYS[4], ARGV[7])
                resign(KEYS[5], ARGV[7], KEYS[4], ARGV[3], tonumber(ARGV[9]))
            end
            return 2
        end
        -- The client's registration stays if there is one: with no waiter left that the
        -- release knew of, it is a waiter's that registered meanwhile (the take that led to
        -- this hold dropped the earlier one).
        if ARGV[8] == '1' then
            wait_here(KEYS[4], ARGV[7], tonumber(ARGV[9])) -- its waiters' turn comes last
        else
            resign(KEYS[5], ARGV[7], KEYS[4], ARGV[3], tonumber(ARGV[9]))
        end
        wake_next(KEYS[4], KEYS[2], ARGV[3])
        return 1
    end)
