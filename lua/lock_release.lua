-- Reentrant lock release (Redisson RLock unlock with unlock latch), with an
-- optional local hand-off (a latchkey addition that writes only Redisson's layout).
-- KEYS[1] lock hash, KEYS[2] lock channel, KEYS[3] the owner's unlock latch key, KEYS[4] the
-- zset of waiting clients, KEYS[5] the listener key;
-- ARGV[1] lease ms a partial release keeps at least, ARGV[2] owner id, ARGV[3] publish
-- command, ARGV[4] latch PX ms, ARGV[5] the holds the owner knows it has (this release drops
-- one), ARGV[6] this release's request number (rising per owner), ARGV[7] the client's token,
-- ARGV[8] 1 if the client has waiters left for the lock (besides the heir, if any), ARGV[9]
-- how long a registration lasts (ms);
-- ARGV[10], ARGV[11], optional: an owner to hand the lock to when this release frees it, and
-- that owner's lease ms.
-- Reply: nil when the owner does not hold the lock; 0 when still held; 1 when freed (the
-- releasing client registered again, last, if it has waiters left — and so woken if no
-- other client waits — and the next waiting client and Redisson's waiters told: see
-- wake_next); 2 when handed to ARGV[10], which then holds it once with its own lease
-- (nothing is published: the lock was never free; the client's registration goes if it has
-- no other waiter). A client with no waiter left stops listening (see resign). Safe to
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
