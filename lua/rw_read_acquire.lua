-- Read lock acquire (Redisson RReadWriteLock read lock), safe to repeat. Keys, arguments
-- and reply: lua.ReadAcquire (calls.go). The owner's timeout key prefix is
-- {N}:<owner>:rwlock_timeout; its writer field is <owner>:write.
--
-- Hold k has its timeout key <prefix>:k, and every one of the owner's keys lives at least
-- the lease: a lease only grows. The count is one above the holds the owner knows.
--
-- Writer preference: a new reader (not a re-entry, not the writer's own downgrade) waits
-- while a writer waits, so that continuous readers cannot keep a writer out for ever. Java
-- readers do not know of the zset and do not wait.
local lease, holds = tonumber(ARGV[1]), tonumber(ARGV[4])
local mode = redis.call('hget', KEYS[1], 'mode')
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    if holds > 0 then
        return -3
    end
    if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
        local pttl = redis.call('pttl', KEYS[1])
        if mode == 'write' then
            return pttl
        end
        redis.call('zremrangebyscore', KEYS[3], '-inf', ARGV[5])
        local writer = redis.call('zrange', KEYS[3], -1, -1, 'withscores')
        if writer[2] then
            local left = tonumber(writer[2]) - tonumber(ARGV[5])
            if pttl >= 0 then
                return math.min(pttl, left)
            end
            return left
        end
    end
    if not mode then
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
end
redis.call('hset', KEYS[1], ARGV[2], holds + 1)
for k = 1, holds + 1 do
    grow(KEYS[2] .. ':' .. k, lease)
end
extend(KEYS[1], lease)
return nil
