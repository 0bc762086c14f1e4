-- Semaphore acquire (Redisson RSemaphore tryAcquire), numbered on the handle's latch
-- (a latchkey addition: Redisson's is not safe to repeat).
-- KEYS[1] semaphore, KEYS[2] the handle's latch, KEYS[3] channel;
-- ARGV[1] permits, ARGV[2] request number, ARGV[3] latch PX ms, ARGV[4] 1 to cancel request
-- ARGV[2] rather than make it, ARGV[5] publish command.
-- Reply: the permits left after taking ARGV[1] (-1 from a repeat: not known), or, when fewer
-- were available, {the permits available} (a missing key has none; nothing changes; nil
-- from a repeat). A cancel gives back what the request took, if it ran and took, and
-- replies 1 if so, else 0. Safe to repeat.
local n, req = tonumber(ARGV[1]), tonumber(ARGV[2])
if ARGV[4] == '1' then
    return cancel(KEYS[2], ARGV[3], req, function()
        give(KEYS[1], KEYS[3], n, ARGV[5])
    end)
end
return numbered(KEYS[2], ARGV[3], req, -1, function()
    local available = int_at(KEYS[1])
    local left = available - n
    if left < 0 then
        return { available }, true
    end
    redis.call('decrby', KEYS[1], n)
    return left
end)
