-- A fair lock waiter gives up its place (Redisson RFairLock acquireFailed). Keys, arguments
-- and reply: lua.FairLeave (calls.go).
-- The waiter's place goes, and the head of a free lock is woken (no release will tell it).
-- No deadline moves (see fair_acquire). Safe to repeat, and a late run changes nothing but
-- the place of a later wait: it never touches the lock.
drop_stale(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[3]))
redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    wake_head(KEYS[2], KEYS[5], ARGV[2])
end
return 0
