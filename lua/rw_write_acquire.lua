-- Write lock acquire (Redisson RReadWriteLock write lock), safe to repeat. Keys, arguments
-- and reply: lua.WriteAcquire (calls.go). A waiting writer's claim (in the zset, by
-- deadline) makes new readers wait; taking the lock drops it. No upgrade: a reader is
-- refused like anyone else (the caller reports it at once).
local r = reenter(KEYS[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[1]))
if r then
    return r == -3 and -3 or nil
end
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('zrem', KEYS[2], ARGV[2])
    return nil
end
if ARGV[6] == '1' then
    redis.call('zadd', KEYS[2], tonumber(ARGV[4]) + tonumber(ARGV[5]), ARGV[2])
    extend(KEYS[2], tonumber(ARGV[5]))
end
return redis.call('pttl', KEYS[1])
