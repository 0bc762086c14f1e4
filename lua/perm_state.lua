-- Permit-expirable semaphore reads and updateLeaseTime (Redisson RPermitExpirableSemaphore,
-- docs/redisson-interop.md), each after reclaiming expired permits. Keys, arguments and
-- reply: lua.PermitState (calls.go). An update only lengthens a lease. A semaphore key
-- holding anything but a count is refused (WRONGTYPE), in every mode. Safe to repeat.
local mode, now = ARGV[1], tonumber(ARGV[2])
int_at(KEYS[1]) -- first: every mode refuses a key of another kind
reclaim(KEYS[1], KEYS[2], KEYS[3], now, ARGV[3])
if mode == 'available' then
    return (int_at(KEYS[1]))
elseif mode == 'acquired' then
    return redis.call('zcard', KEYS[2])
elseif mode == 'permits' then
    local n, exists = int_at(KEYS[1])
    if not exists then
        return 0
    end
    return n + redis.call('zcard', KEYS[2])
end
local raw = unhex(ARGV[4])
local exp = redis.call('zscore', KEYS[2], raw)
if mode == 'update' then
    if not exp then
        return 0
    end
    if tonumber(exp) < tonumber(ARGV[5]) then
        redis.call('zadd', KEYS[2], ARGV[5], raw)
    end
    return 1
end
if not exp then
    return nil
elseif exp == no_expiry then
    return -1
end
return tonumber(exp) - now
