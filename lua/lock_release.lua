-- Reentrant lock release (Redisson RLock unlock with unlock latch, §2.4 and §1.6), with an
-- optional local hand-off (a latchkey addition that writes only Redisson's layout).
-- KEYS[1] lock hash, KEYS[2] lock channel, KEYS[3] the owner's unlock latch key;
-- ARGV[1] unlock message (0), ARGV[2] lease ms a partial release keeps at least,
-- ARGV[3] owner id, ARGV[4] publish command, ARGV[5] latch PX ms,
-- ARGV[6] the holds the owner knows it has (this release drops one),
-- ARGV[7] this release's request number (rising per owner);
-- ARGV[8], ARGV[9], optional: an owner to hand the lock to when this release frees it, and
-- that owner's lease ms.
-- Reply: nil when the owner does not hold the lock; 0 when still held; 1 when freed (and the
-- message published); 2 when handed to ARGV[8], which then holds it once with its own lease
-- (nothing is published: the lock was never free). Safe to repeat (see release).
local freed = 1
if ARGV[8] then
    freed = 2
end
return release(KEYS[1], KEYS[3], ARGV[5], ARGV[3], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[2]), freed,
    function()
        -- the owner's field was the hash's only one: the key went with it
        if ARGV[8] then
            redis.call('hset', KEYS[1], ARGV[8], 1)
            redis.call('pexpire', KEYS[1], ARGV[9])
            return 2
        end
        redis.call(ARGV[4], KEYS[2], ARGV[1])
        return 1
    end)
