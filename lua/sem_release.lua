-- Semaphore release and addPermits (Redisson RSemaphore), numbered on the handle's latch
-- (a latchkey addition: Redisson's is not safe to repeat). Keys, arguments and reply:
-- lua.SemRelease (calls.go). A positive total is published and wakes a waiting client (see
-- offer). Safe to repeat.
return numbered(KEYS[2], ARGV[3], tonumber(ARGV[2]), 1, function()
    offer(KEYS[1], KEYS[3], tonumber(ARGV[1]), ARGV[4], KEYS[4], KEYS[5])
    return 1
end)
