-- Permit-expirable semaphore trySetPermits, setPermits and addPermits (Redisson
-- RPermitExpirableSemaphore), numbered on the handle's latch. Keys, arguments and reply:
-- lua.PermitSet (calls.go). 'set' makes the permits in all, available and acquired, the
-- number given, and 'add' adds it (negative: takes away) to the available ones; each
-- publishes as Redisson's does (set: the total, add: the permits added, when positive). Safe
-- to repeat.
local mode, p, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
return numbered(KEYS[3], ARGV[5], tonumber(ARGV[4]), 1, function()
    reclaim(KEYS[1], KEYS[2], KEYS[4], now, ARGV[6])
    local n, exists = int_at(KEYS[1])
    local v = exists and n
    local change = 0
    if mode == 'add' then
        redis.call('incrby', KEYS[1], p)
        change = p
    elseif not v then
        redis.call('set', KEYS[1], p)
        change = p
    elseif mode == 'try' then
        return nil
    else
        local all = n + redis.call('zcard', KEYS[2])
        if all ~= p then
            redis.call('incrby', KEYS[1], p - all)
            change = p
        end
    end
    if change > 0 then
        redis.call(ARGV[6], KEYS[4], change)
    end
    return 1
end)
