-- A client's last waiter on a plain lock stops waiting without the lock (a latchkey addition).
-- KEYS[1] lock hash, KEYS[2] the zset of waiting clients, KEYS[3] lock channel; ARGV[1] the
-- client's token, ARGV[2] publish command.
-- The client's registration goes. If it was gone already — a release may have woken this
-- client as its waiter left, and no other client was told — and the lock is free, the next
-- client is woken instead. Safe to repeat: it never touches the lock.
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 and redis.call('exists', KEYS[1]) == 0 then
    wake_next(KEYS[2], KEYS[3], ARGV[2])
end
return 0
