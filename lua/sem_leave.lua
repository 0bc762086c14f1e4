-- A client's last waiter on a semaphore stops waiting without permits (a latchkey
-- addition). Keys, arguments and reply: lua.SemLeave (calls.go).
-- The client's registration goes, and its listening (see resign). If the registration was
-- gone already — a change may have woken this client as its waiter left — the wake passes to
-- the next client the permits can serve (wake_wanting). Safe to repeat.
local gone = redis.call('zrem', KEYS[2], ARGV[1]) == 0
redis.call('hdel', KEYS[3], ARGV[1])
resign(KEYS[4], ARGV[1], KEYS[2], ARGV[2], tonumber(ARGV[3]))
if gone then
    wake_wanting(KEYS[2], KEYS[3], int_at(KEYS[1]), ARGV[2])
end
return 0
