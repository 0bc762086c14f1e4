-- Permit-expirable semaphore release (Redisson RPermitExpirableSemaphore release),
-- numbered on the handle's latch. Keys, arguments and reply: lua.PermitRelease (calls.go).
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
