-- Semaphore release and addPermits (Redisson RSemaphore), numbered on the handle's
-- latch (a latchkey addition: Redisson's is not safe to repeat).
-- KEYS[1] semaphore, KEYS[2] the handle's latch, KEYS[3] channel, KEYS[4] the zset of waiting
-- clients, KEYS[5] their wants (see sem_wait);
-- ARGV[1] permits to add (negative: taken away), ARGV[2] request number, ARGV[3] latch PX ms,
-- ARGV[4] publish command.
-- Reply: 1. A positive total is published and wakes a waiting client (see offer). Safe to
-- repeat.
return numbered(KEYS[2], ARGV[3], tonumber(ARGV[2]), 1, function()
    offer(KEYS[1], KEYS[3], tonumber(ARGV[1]), ARGV[4], KEYS[4], KEYS[5])
    return 1
end)
