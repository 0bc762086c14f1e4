-- Renews the leases of acquired permits kept by the watchdog (a latchkey addition: Redisson
-- renews no permit). Keys, arguments and reply: lua.PermitRenew (calls.go). A lease only
-- grows.
local lease, now = tonumber(ARGV[1]), tonumber(ARGV[2])
return renew_each(#KEYS, function(i)
    local key, ids, all = KEYS[i], ARGV[i + 2], true
    for j = 1, #ids, 32 do
        local raw = unhex(string.sub(ids, j, j + 31))
        local exp = tonumber(redis.call('zscore', key, raw))
        if exp and exp > now then
            -- Written even when the lease is longer already (by 1 ms: a zadd of the same score
            -- writes nothing), so that a WAIT after the script covers whatever set it.
            redis.call('zadd', key, math.max(now + lease, exp + 1), raw)
        else
            all = false
        end
    end
    return all
end)
