-- A fair lock waiter gives up its place (Redisson RFairLock acquireFailed, §3.5).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] latchkey waiters' leases,
-- KEYS[5] the lock channel; ARGV[1] owner id, ARGV[2] publish command, ARGV[3] now (epoch
-- ms).
-- The waiter's place goes. A lock granted to it as its wait ended, which it never learned
-- of, is released. If the lock is free, it passes to the head (whom no release will tell).
-- No deadline moves (see fair_acquire). Reply: 1 when the owner had been granted the lock,
-- else 0. Safe to repeat.
drop_stale(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[3]))
redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
local granted = redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2])
end
return granted
