-- Permit-expirable semaphore acquire (Redisson RPermitExpirableSemaphore tryAcquire),
-- numbered on the handle's latch (a latchkey addition: Redisson's is not safe to repeat).
-- KEYS[1] semaphore, KEYS[2] acquired permits (zset), KEYS[3] the handle's latch, KEYS[4]
-- channel;
-- ARGV[1] the permits' expiry (epoch ms, or no_expiry), ARGV[2] now (epoch ms), ARGV[3]
-- request number, ARGV[4] latch PX ms, ARGV[5] 1 to cancel request ARGV[3] rather than make
-- it, ARGV[6] publish command, ARGV[7..] the permits' IDs (hex).
-- Reply: the permits left after taking them (-1 from a repeat: not known), or, when too few
-- were available, {ms until the nearest expiry} or nil when no acquired permit expires
-- (nothing is taken; expired ones are reclaimed) — or {'total', permits in all} when the
-- semaphore exists and has fewer permits in all, available and acquired, than asked for;
-- nil from a repeat of a request that took nothing. A cancel gives back what the request
-- took, if it ran and took, and replies 1 if so, else 0. Safe to repeat.
local now, req = tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = from(ARGV, 7)
if ARGV[5] == '1' then
    return cancel(KEYS[3], ARGV[4], req, function()
        release_permits(KEYS[1], KEYS[2], KEYS[4], now, ARGV[6], ids)
    end)
end
return numbered(KEYS[3], ARGV[4], req, -1, function()
    reclaim(KEYS[1], KEYS[2], KEYS[4], now, ARGV[6], #ids)
    local available, exists = int_at(KEYS[1])
    local left = available - #ids
    if left < 0 and exists then
        local total = available + redis.call('zcard', KEYS[2])
        if #ids > total then
            return { 'total', total }, true -- more than there are in all: waiting is no use
        end
    end
    if left < 0 then
        local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
        if first[2] and first[2] ~= no_expiry then
            return { math.max(tonumber(first[2]) - now, 0) }, true
        end
        return nil
    end
    redis.call('decrby', KEYS[1], #ids)
    for _, id in ipairs(ids) do
        redis.call('zadd', KEYS[2], ARGV[1], unhex(id))
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return left
end)
