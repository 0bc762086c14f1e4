-- Batched lease renewal (Redisson watchdog). Keys, arguments and reply: lua.LockRenew
-- (calls.go). A lease only grows, and is written even when it is the longer (keep_lease).
local lease = tonumber(ARGV[1])
return renew_each(#KEYS, function(i)
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 0 then
        return false
    end
    keep_lease(KEYS[i], lease)
    return true
end)
