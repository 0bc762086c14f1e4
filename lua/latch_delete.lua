-- Countdown latch delete (Redisson RCountDownLatch), numbered on the handle's latch.
-- KEYS[1] latch, KEYS[2] the handle's unlock latch;
-- ARGV[1] request number, ARGV[2] latch PX ms, ARGV[3] publish command, ARGV[4] channel (see
-- latch_set).
-- Reply: 1 when it deleted the latch (and published 1, NEW_COUNT), nil when there was none;
-- a WRONGTYPE error, deleting nothing, when the key holds anything but a count. Safe to
-- repeat.
return numbered(KEYS[2], ARGV[2], tonumber(ARGV[1]), 1, function()
    local _, exists = int_at(KEYS[1])
    if not exists then
        return nil
    end
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], ARGV[4], 1)
    return 1
end)
