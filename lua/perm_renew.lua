-- Renews the leases of acquired permits kept by the watchdog (a latchkey addition: Redisson
-- renews no permit).
-- KEYS[1..k] acquired-permit zsets; ARGV[1] lease ms, ARGV[2] now (epoch ms), ARGV[2+i] the
-- permits (their hex IDs, concatenated) of one acquisition in KEYS[i].
-- Reply: an array, 1 where every permit of the acquisition was still acquired and unexpired
-- (each now expires at least ARGV[1] from now: a lease only grows), 0 otherwise.
local lease, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local held = {}
for i, key in ipairs(KEYS) do
    local ids, ok = ARGV[i + 2], 1
    for j = 1, #ids, 32 do
        local raw = unhex(string.sub(ids, j, j + 31))
        local exp = tonumber(redis.call('zscore', key, raw))
        if exp and exp > now then
            -- Written even when the lease is longer already (by 1 ms: a zadd of the same score
            -- writes nothing), so that a WAIT after the script covers whatever set it.
            redis.call('zadd', key, math.max(now + lease, exp + 1), raw)
        else
            ok = 0
        end
    end
    held[i] = ok
end
return held
