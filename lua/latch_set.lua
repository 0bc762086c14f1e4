-- Countdown latch trySetCount (Redisson RCountDownLatch), numbered on the handle's latch.
-- KEYS[1] latch, KEYS[2] the handle's unlock latch;
-- ARGV[1] count, ARGV[2] request number, ARGV[3] latch PX ms, ARGV[4] publish command,
-- ARGV[5] channel (not a key: a name with its own hash tag has its channel in another slot).
-- Reply: 1 when it set the count (and published 1, NEW_COUNT), nil when the latch existed;
-- a WRONGTYPE error when the key holds anything but a count. Safe to repeat.
return numbered(KEYS[2], ARGV[3], tonumber(ARGV[2]), 1, function()
    local _, exists = int_at(KEYS[1])
    if exists then
        return nil
    end
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[4], ARGV[5], 1)
    return 1
end)
