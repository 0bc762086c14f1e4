-- Permit-expirable semaphore release (Redisson RPermitExpirableSemaphore release),
-- numbered on the handle's latch.
-- KEYS[1] semaphore, KEYS[2] acquired permits (zset), KEYS[3] the handle's latch, KEYS[4]
-- channel;
-- ARGV[1] now (epoch ms), ARGV[2] request number, ARGV[3] latch PX ms, ARGV[4] publish
-- command, ARGV[5..] the permits' IDs (hex).
-- Reply: how many of the permits were acquired and unexpired (-1 from a repeat: not known).
-- Every listed permit still in the zset, expired or not, is given back and the new total
-- published; expired permits are reclaimed. Safe to repeat.
return numbered(KEYS[3], ARGV[3], tonumber(ARGV[2]), -1, function()
    local now = tonumber(ARGV[1])
    local live = release_permits(KEYS[1], KEYS[2], KEYS[4], now, ARGV[4], from(ARGV, 5))
    if live == 0 then
        int_at(KEYS[1]) -- none given back: a key of another kind is why, if it is one
    end
    reclaim(KEYS[1], KEYS[2], KEYS[4], now, ARGV[4])
    return live
end)
