-- Fair lock release (Redisson RFairLock unlock, with the unlock latch).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] latchkey waiters' leases,
-- KEYS[5] the lock channel (a waiter's own channel is it plus ':' and the waiter's owner id),
-- KEYS[6] the owner's unlock latch; ARGV[1] lease ms a partial release keeps at least,
-- ARGV[2] owner id, ARGV[3] publish command, ARGV[4] latch PX ms, ARGV[5] the holds the owner
-- knows it has, ARGV[6] this release's request number, ARGV[7] now (epoch ms).
-- Reply: nil when the owner does not hold the lock; 0 when still held; 1 when freed. A freed
-- lock goes to the head waiter (see hand_on) — also when the release finds it gone already,
-- as Redisson tells the head then, so that the head need not wait for its next attempt. Safe
-- to repeat (see release).
local head = drop_stale(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[7])) -- the release leaves the queue as it is
return release(KEYS[1], KEYS[6], ARGV[4], ARGV[2], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[1]), 1,
    function()
        hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], head)
        return 1
    end,
    function()
        if redis.call('exists', KEYS[1]) == 0 then
            hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], head)
        end
    end)
