-- A fair lock waiter gives up its place (Redisson RFairLock acquireFailed, §3.5).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] the lock channel;
-- ARGV[1] owner id, ARGV[2] wait ms, ARGV[3] publish command, ARGV[4] unlock message (0).
-- Every waiter behind moves up a place, its deadline one wait earlier. When the leaver was
-- the head and the lock is free, the new head is told: no release will. Reply: 1 when the
-- owner had a place, 0 when not. Safe to repeat.
local pos = redis.call('lpos', KEYS[2], ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if not pos then
    return 0
end
for _, w in ipairs(redis.call('lrange', KEYS[2], pos + 1, -1)) do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), w)
end
redis.call('lrem', KEYS[2], 0, ARGV[1])
if pos == 0 and redis.call('exists', KEYS[1]) == 0 then
    wake_head(KEYS[2], KEYS[4], ARGV[3], ARGV[4])
end
return 1
