-- Fair lock release (Redisson RFairLock unlock, with the unlock latch). Keys, arguments and
-- reply: lua.FairRelease (calls.go). A freed lock wakes the head waiter (see wake_head) —
-- also when the release finds it gone already, as Redisson tells the head then, so that the
-- head need not wait for its next attempt. Safe to repeat (see release).
local head = drop_stale(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[7])) -- the release leaves the queue as it is
return release(KEYS[1], KEYS[6], ARGV[4], ARGV[2], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[1]), 1,
    function()
        wake_head(KEYS[2], KEYS[5], ARGV[3], head)
        return 1
    end,
    function()
        if redis.call('exists', KEYS[1]) == 0 then
            wake_head(KEYS[2], KEYS[5], ARGV[3], head)
        end
    end)
