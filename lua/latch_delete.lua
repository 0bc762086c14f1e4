-- Countdown latch delete (Redisson RCountDownLatch), numbered on the handle's latch.
-- Keys, arguments and reply: lua.LatchRequest (calls.go). A deleted latch publishes 1
-- (NEW_COUNT); a key holding anything but a count is refused (WRONGTYPE), deleting nothing.
-- Safe to repeat.
return numbered(KEYS[2], ARGV[2], tonumber(ARGV[1]), 1, function()
    local _, exists = int_at(KEYS[1])
    if not exists then
        return nil
    end
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], ARGV[4], 1)
    return 1
end)
