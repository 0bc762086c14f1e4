-- Fair lock release (Redisson RFairLock unlock, with the unlock latch). Keys, arguments and
-- reply: lua.FairRelease (calls.go). A waiter's own channel is the lock channel plus ':' and
-- its owner id. A freed lock goes to the head waiter (see hand_on) — also when the release
-- finds it gone already, as Redisson tells the head then, so that the head need not wait for
-- its next attempt. Safe to repeat (see release).
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
