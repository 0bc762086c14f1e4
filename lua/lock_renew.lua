-- Batched lease renewal (Redisson watchdog).
-- KEYS[1..k] lock hashes; ARGV[1] lease ms, ARGV[i+1] the owner id to check in KEYS[i].
-- Reply: an array with 1 where the owner still held KEYS[i] (its TTL is now at least the
-- lease), 0 where not. A lease only grows: a longer TTL is kept — but written all the same,
-- so that a WAIT after the script covers whatever set it.
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
