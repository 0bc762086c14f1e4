-- Batched renewal of read holds (Redisson's read lock renewal). Keys, arguments and reply:
-- lua.ReadRenew (calls.go). For every owner still holding reads (count c), its timeout keys
-- 1..c and the lock get a TTL of at least the lease (a lease only grows).
local lease = tonumber(ARGV[1])
local held = {}
for i = 1, #KEYS / 2 do
    local key = KEYS[2 * i - 1]
    local n = tonumber(redis.call('hget', key, ARGV[i + 1]))
    if n then
        for k = 1, n do
            grow(KEYS[2 * i] .. ':' .. k, lease)
        end
        redis.call('pexpire', key, math.max(redis.call('pttl', key), lease)) -- written: see lock_renew
        held[i] = 1
    else
        held[i] = 0
    end
end
return held
