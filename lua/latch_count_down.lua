-- Countdown latch countDown (Redisson RCountDownLatch), numbered on the handle's latch
-- (a latchkey addition: Redisson's is not safe to repeat, so Java never retries it).
-- Keys, arguments and reply: lua.LatchRequest (calls.go).
-- At zero the key goes and 0 (ZERO_COUNT) is published; a count-down of a latch at zero or
-- absent changes nothing, as in Redisson (-1, deleted). A key holding anything but a count
-- is refused (DECR's error). Safe to repeat.
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
