-- Renews the leases of acquired permits kept by the watchdog (a latchkey addition: Redisson
-- renews no permit). Keys, arguments and reply: lua.PermitRenew (calls.go). A lease only
-- grows.
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
