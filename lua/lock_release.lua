-- Reentrant lock release (Redisson RLock unlock with unlock latch, §2.4 and §1.6).
-- KEYS[1] lock hash, KEYS[2] lock channel, KEYS[3] unlock latch key;
-- KEYS[4], optional: the owner's previous unlock latch, done with, to delete.
-- ARGV[1] unlock message (0), ARGV[2] lease ms kept after a partial release,
-- ARGV[3] owner id, ARGV[4] publish command, ARGV[5] latch PX ms.
-- Reply: the stored outcome when this request already ran (a retry);
-- nil when the owner does not hold the lock; 0 when still held; 1 when freed.
if KEYS[4] then
    redis.call('del', KEYS[4])
end
local done = redis.call('get', KEYS[3])
if done then
    return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
