-- Semaphore trySetPermits, setPermits and drainPermits (Redisson RSemaphore), numbered on
-- the handle's latch. Keys, arguments and reply: lua.SemSet (calls.go). A positive number
-- set is published and wakes a waiting client (see announce); a drain sets an existing key to 0
-- and publishes nothing. Safe to repeat.
local mode, p = ARGV[1], tonumber(ARGV[2])
local replay = 1
if mode == 'drain' then
    replay = -1
end
return numbered(KEYS[2], ARGV[4], tonumber(ARGV[3]), replay, function()
    local n, exists = int_at(KEYS[1])
    local v = exists and n
    if mode == 'drain' then
        if v then
            redis.call('set', KEYS[1], 0, 'keepttl')
        end
        return n
    end
    if mode == 'try' and v then
        return nil
    end
    redis.call('set', KEYS[1], p)
    announce(KEYS[3], p, ARGV[5], KEYS[4], KEYS[5])
    return 1
end)
