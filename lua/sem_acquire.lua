-- Semaphore acquire (Redisson RSemaphore tryAcquire), numbered on the handle's latch
-- (a latchkey addition: Redisson's is not safe to repeat). Keys, arguments and reply:
-- lua.SemAcquire (calls.go).
-- A waiting acquire that does not take registers its client (sem_wait) and, if some permits
-- are left, passes the wake it may have had on (wake_wanting); one that takes drops its
-- client's registration unless it has other waiters (then it keeps its want, 1 if none is
-- known), and wakes another client for the permits left (its own next waiter is its
-- client's to wake). A cancel gives back what the request took, if it ran and took (see
-- offer). Safe to repeat.
local n, req = tonumber(ARGV[1]), tonumber(ARGV[2])
if ARGV[4] == '1' then
    return cancel(KEYS[2], ARGV[3], req, function()
        offer(KEYS[1], KEYS[3], n, ARGV[5], KEYS[4], KEYS[5])
    end)
end
return numbered(KEYS[2], ARGV[3], req, -1, function()
    local available = int_at(KEYS[1])
    local left = available - n
    local token, ms = ARGV[6], tonumber(ARGV[7])
    if left < 0 then
        if token then
            sem_wait(KEYS[4], KEYS[5], token, n, ms)
            wake_wanting(KEYS[4], KEYS[5], available, ARGV[5])
            if listen(KEYS[6], token, ms) then
                return { available, 1 }, true
            end
        end
        return { available }, true
    end
    redis.call('decrby', KEYS[1], n)
    if token then
        if ARGV[8] == '1' then
            if not redis.call('zscore', KEYS[4], token) then
                -- Woken (which unregistered it): registered again, last. What its next
                -- waiter wants, that waiter's attempt records; until then, as little as can
                -- be (a wake it cannot use it passes on).
                wait_here(KEYS[4], token, ms)
                redis.call('hsetnx', KEYS[5], token, 1)
            end
        else
            redis.call('zrem', KEYS[4], token)
            redis.call('hdel', KEYS[5], token)
            resign(KEYS[6], token, KEYS[4], ARGV[5], ms)
        end
    end
    wake_wanting(KEYS[4], KEYS[5], left, ARGV[5], token)
    return left
end)
