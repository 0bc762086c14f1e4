-- Countdown latch delete (Redisson RCountDownLatch, §6), numbered on the handle's latch.
-- KEYS[1] latch, KEYS[2] the handle's unlock latch, KEYS[3] channel;
-- ARGV[1] request number, ARGV[2] latch PX ms, ARGV[3] publish command.
-- Reply: 1 when it deleted the latch (and published 1, NEW_COUNT), nil when there was none.
-- Safe to repeat.
return numbered(KEYS[2], ARGV[2], tonumber(ARGV[1]), 1, function()
    if redis.call('del', KEYS[1]) == 0 then
        return nil
    end
    redis.call(ARGV[3], KEYS[3], 1)
    return 1
end)
