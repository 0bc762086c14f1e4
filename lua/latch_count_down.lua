-- Countdown latch countDown (Redisson RCountDownLatch), numbered on the handle's latch
-- (a latchkey addition: Redisson's is not safe to repeat, so Java never retries it).
-- KEYS[1] latch, KEYS[2] the handle's unlock latch;
-- ARGV[1] request number, ARGV[2] latch PX ms, ARGV[3] publish command, ARGV[4] channel (see
-- latch_set).
-- Reply: 1. At zero the key goes and 0 (ZERO_COUNT) is published; a count-down of a latch
-- at zero or absent changes nothing, as in Redisson (-1, deleted). A key holding anything
-- but a count is refused (DECR's error). Safe to repeat.
return numbered(KEYS[2], ARGV[2], tonumber(ARGV[1]), 1, function()
    local v = redis.call('decr', KEYS[1])
    if v <= 0 then
        redis.call('del', KEYS[1])
    end
    if v == 0 then
        redis.call(ARGV[3], ARGV[4], 0)
    end
    return 1
end)
