-- A client's last waiter on a plain lock stops waiting without the lock (a latchkey
-- addition). Keys, arguments and reply: lua.LockLeave (calls.go).
-- The client's registration goes, and its listening (see resign). If the registration was
-- gone already — a release may have woken this client as its waiter left, and no other
-- client was told — and the lock is free, the next client is woken instead. Safe to repeat:
-- it never touches the lock.
local gone = redis.call('zrem', KEYS[2], ARGV[1]) == 0
resign(KEYS[4], ARGV[1], KEYS[2], ARGV[2], tonumber(ARGV[3]))
if gone and redis.call('exists', KEYS[1]) == 0 then
    wake_next(KEYS[2], KEYS[3], ARGV[2])
end
return 0
