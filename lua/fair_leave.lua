-- A fair lock waiter gives up its place (Redisson RFairLock acquireFailed). Keys, arguments
-- and reply: lua.FairLeave (calls.go).
-- The waiter's place goes, and a free lock passes to the head (whom no release will tell).
-- No deadline moves (see fair_acquire). A lock a release granted the owner as the wait
-- ended is the caller's to take. Safe to repeat, and a late run changes nothing but the
-- place of a later wait: it never touches the lock.
drop_stale(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[3]))
redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2])
end
return redis.call('hexists', KEYS[1], ARGV[1])
