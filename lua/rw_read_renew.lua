-- Batched renewal of read holds (Redisson's read lock renewal). Keys, arguments and reply:
-- lua.ReadRenew (calls.go). For every owner still holding reads (count c), its timeout keys
-- 1..c and the lock get a TTL of at least the lease (a lease only grows).
local lease = tonumber(ARGV[1])
return renew_each(#KEYS / 2, function(i)
    local key = KEYS[2 * i - 1]
    local n = tonumber(redis.call('hget', key, ARGV[i + 1]))
    if not n then
        return false
    end
    for k = 1, n do
        grow(KEYS[2 * i] .. ':' .. k, lease)
    end
    keep_lease(key, lease)
    return true
end)
