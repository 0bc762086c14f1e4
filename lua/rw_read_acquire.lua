-- Read lock acquire (Redisson RReadWriteLock read lock), safe to repeat.
-- KEYS[1] lock hash, KEYS[2] the owner's timeout key prefix ({N}:<owner>:rwlock_timeout),
-- KEYS[3] the zset of waiting writers (a latchkey addition, see below);
-- ARGV[1] lease ms, ARGV[2] owner id, ARGV[3] its writer field (<owner>:write), whose
-- write hold lets it read (a downgrade), or '' for none (a handle that is not Reentrant),
-- ARGV[4] the read holds the owner knows it has, ARGV[5] now (epoch ms).
-- Reply: nil when acquired or re-entered; -3 when the owner knows of read holds but its field
-- is gone; otherwise the ms until the lock may come free with no message (-1: unknown).
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
