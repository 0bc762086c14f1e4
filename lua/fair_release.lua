-- Fair lock release (Redisson RFairLock unlock, §3.6, with the unlock latch, §1.6).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] the lock channel (a waiter's
-- own channel is it plus ':' and the waiter's owner id), KEYS[5] the owner's unlock latch;
-- ARGV[1] unlock message (0), ARGV[2] lease ms a partial release keeps at least, ARGV[3] owner
-- id, ARGV[4] publish command, ARGV[5] latch PX ms, ARGV[6] the holds the owner knows it has,
-- ARGV[7] this release's request number, ARGV[8] now (epoch ms).
-- Reply: nil when the owner does not hold the lock; 0 when still held; 1 when freed. Only the
-- head waiter is told, on its own channel — also when the lock was gone already, as Redisson
-- does, so that the head need not wait for its next attempt. Safe to repeat (see release).
drop_stale(KEYS[2], KEYS[3], tonumber(ARGV[8]))
if redis.call('exists', KEYS[1]) == 0 then
    wake_head(KEYS[2], KEYS[4], ARGV[4], ARGV[1])
end
return release(KEYS[1], KEYS[5], ARGV[5], ARGV[3], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[2]), 1,
    function()
        wake_head(KEYS[2], KEYS[4], ARGV[4], ARGV[1])
        return 1
    end)
