-- Batched lease renewal (Redisson watchdog, §2.6).
-- KEYS[1..k] lock hashes; ARGV[1] lease ms, ARGV[i+1] the owner id to check in KEYS[i].
-- Reply: an array with 1 where the owner still held KEYS[i] (its TTL is now the lease), 0 where not.
local held = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        held[i] = 1
    else
        held[i] = 0
    end
end
return held
