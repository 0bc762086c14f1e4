-- Permit-expirable semaphore acquire (Redisson RPermitExpirableSemaphore tryAcquire),
-- numbered on the handle's latch (a latchkey addition: Redisson's is not safe to repeat).
-- Keys, arguments and reply: lua.PermitAcquire (calls.go). Too few available takes nothing;
-- expired permits are reclaimed. Safe to repeat.
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
