-- Read lock release (Redisson RReadWriteLock read unlock, with the unlock latch). Keys,
-- arguments and reply: lua.ReadRelease (calls.go).
--
-- The hold's timeout key goes; the owner's other holds keep at least the lease, and the
-- lock's TTL becomes the longest any read hold has left (so holds of dead readers run out),
-- but never less than it was while a writer holds it (the owner's own downgrade). Freed, it
-- tells one waiter (0) — or all (1) while a writer waits, so that the writer among them is
-- woken, not a reader that may not enter. A lock found gone already is announced too, at
-- every run, as Redisson does. Safe to repeat (see numbered).
local holds = tonumber(ARGV[5])
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
end
local replay = 1
if holds > 1 then
    replay = 0
end
return numbered(KEYS[5], ARGV[4], tonumber(ARGV[6]), replay, function()
    if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
        return nil
    end
    if holds > 1 then
        redis.call('hset', KEYS[1], ARGV[2], holds - 1)
        for k = 1, holds - 1 do
            grow(KEYS[3] .. ':' .. k, tonumber(ARGV[8]))
        end
    else
        redis.call('hdel', KEYS[1], ARGV[2])
    end
    redis.call('del', KEYS[3] .. ':' .. math.max(holds, 1))
    if redis.call('hlen', KEYS[1]) > 1 then
        local left = -3
        local fields = redis.call('hgetall', KEYS[1])
        for i = 1, #fields, 2 do
            local n = tonumber(fields[i + 1])
            if n then
                for k = n, 1, -1 do
                    left = math.max(left, redis.call('pttl', KEYS[4] .. ':' .. fields[i] .. ':rwlock_timeout:' .. k))
                end
            end
        end
        if mode == 'write' then
            if left > redis.call('pttl', KEYS[1]) then
                redis.call('pexpire', KEYS[1], left)
            end
            return 0
        end
        if left > 0 then
            redis.call('pexpire', KEYS[1], left)
            return 0
        end
    end
    redis.call('del', KEYS[1])
    redis.call('zremrangebyscore', KEYS[6], '-inf', ARGV[7])
    if redis.call('zcard', KEYS[6]) > 0 then
        redis.call(ARGV[3], KEYS[2], 1)
    else
        redis.call(ARGV[3], KEYS[2], ARGV[1])
    end
    return 1
end)
