-- Semaphore trySetPermits, setPermits and drainPermits (Redisson RSemaphore), numbered
-- on the handle's latch.
-- KEYS[1] semaphore, KEYS[2] the handle's latch, KEYS[3] channel, KEYS[4] the zset of waiting
-- clients, KEYS[5] their wants (see sem_wait);
-- ARGV[1] 'try', 'set' or 'drain', ARGV[2] permits, ARGV[3] request number, ARGV[4] latch
-- PX ms, ARGV[5] publish command.
-- Reply: try: 1 when it set the permits, nil when the semaphore existed. set: 1. A positive
-- number set is published and wakes a waiting client (see offer). drain: the permits there were (0 when none; the
-- key is set to 0 if it exists, and nothing is published), -1 from a repeat (not known).
-- Safe to repeat.
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
    redis.call('set', KEYS[1], 0)
    offer(KEYS[1], KEYS[3], p, ARGV[5], KEYS[4], KEYS[5])
    return 1
end)
