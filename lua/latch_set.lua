-- Countdown latch trySetCount (Redisson RCountDownLatch), numbered on the handle's latch.
-- Keys, arguments and reply: lua.LatchRequest (calls.go). A count set publishes 1
-- (NEW_COUNT); a key holding anything but a count is refused (WRONGTYPE). Safe to repeat.
return numbered(KEYS[2], ARGV[3], tonumber(ARGV[2]), 1, function()
    local _, exists = int_at(KEYS[1])
    if exists then
        return nil
    end
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[4], ARGV[5], 1)
    return 1
end)
