-- Countdown latch trySetCount (Redisson RCountDownLatch, §6), numbered on the handle's latch.
-- KEYS[1] latch, KEYS[2] the handle's unlock latch, KEYS[3] channel;
-- ARGV[1] count, ARGV[2] request number, ARGV[3] latch PX ms, ARGV[4] publish command.
-- Reply: 1 when it set the count (and published 1, NEW_COUNT), nil when the latch existed.
-- Safe to repeat.
return numbered(KEYS[2], ARGV[3], tonumber(ARGV[2]), 1, function()
    if redis.call('exists', KEYS[1]) == 1 then
        return nil
    end
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[4], KEYS[3], 1)
    return 1
end)
