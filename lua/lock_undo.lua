-- Undo an acquire whose reply was lost (a latchkey addition; it writes only Redisson's layout).
-- KEYS[1] lock hash, KEYS[2] lock channel.
-- ARGV[1] owner id, ARGV[2] hold count the owner had before the lost attempt,
-- ARGV[3] lease ms kept when still held, ARGV[4] publish command, ARGV[5] unlock message (0).
-- The lost attempt can only have added one hold, so one hold is taken back exactly when the
-- count is one above what the owner knew. Reply: 1 when a hold was taken back, 0 otherwise.
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
if count ~= tonumber(ARGV[2]) + 1 then
    return 0
end
if count > 1 then
    redis.call('hincrby', KEYS[1], ARGV[1], -1)
    redis.call('pexpire', KEYS[1], ARGV[3])
    return 1
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[5])
return 1
