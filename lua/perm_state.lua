-- Permit-expirable semaphore reads and updateLeaseTime (Redisson RPermitExpirableSemaphore,
-- docs/redisson-interop.md), each after reclaiming expired permits.
-- KEYS[1] semaphore, KEYS[2] acquired permits (zset), KEYS[3] channel;
-- ARGV[1] 'available', 'acquired', 'permits', 'lease' or 'update', ARGV[2] now (epoch ms),
-- ARGV[3] publish command, ARGV[4] a permit's ID (hex; lease, update), ARGV[5] its new
-- expiry (epoch ms or no_expiry; update).
-- Reply: available: the available permits; acquired: the acquired ones; permits: both (0
-- when the semaphore does not exist); lease: the ms the permit has left, -1 when it never
-- expires, nil when it is not acquired; update: 1 when the permit was acquired (its expiry
-- set to at least ARGV[5]: a lease only grows), 0 when not. A semaphore key holding
-- anything but a count is refused (WRONGTYPE), in every mode. Safe to repeat.
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
