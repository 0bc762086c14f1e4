-- Batched lease renewal (Redisson watchdog). Keys, arguments and reply: lua.LockRenew
-- (calls.go). A lease only grows: a longer TTL is kept — but written all the same, so that a
-- WAIT after the script covers whatever set it.
local held = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], math.max(redis.call('pttl', KEYS[i]), tonumber(ARGV[1])))
        held[i] = 1
    else
        held[i] = 0
    end
end
return held
