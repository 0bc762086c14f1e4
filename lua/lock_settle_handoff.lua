-- Settle a hand-off whose outcome stayed unknown (a latchkey addition; it writes only
-- Redisson's layout). The heir was told it holds the lock when the release was sent, so the
-- settlement completes the hand-off: if the release ran, the heir holds the lock already; if
-- it never ran, the releaser still does, and its hold goes to the heir as the release would
-- have passed it; if neither holds the lock, it was lost before the release, and nothing
-- changes.
-- The settlement is a request of the releaser's like its unlocks, numbered after the
-- release, and fenced by the same latch (see lock_release.lua): once it has run, a late run of
-- the release changes nothing; and a run of the settlement itself reaching Redis after the
-- mark has passed it — after the releaser took the lock again — changes nothing.
-- KEYS[1] lock hash, KEYS[2] the releaser's unlock latch;
-- ARGV[1] releaser owner, ARGV[2] this settlement's request number, ARGV[3] latch PX ms,
-- ARGV[4] heir lease ms, ARGV[5] heir owner.
-- The caller holds the heir's handle, so the heir has made no request of its own meanwhile.
-- Reply: 1 when the heir holds the lock, 0 when it does not.
local n = tonumber(ARGV[2])
local last = tonumber(redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3], 'get'))
if last and math.abs(last) >= n then
    if last ~= n then
        redis.call('set', KEYS[2], last, 'px', ARGV[3])
    end
    return redis.call('hexists', KEYS[1], ARGV[5])
end
if redis.call('hexists', KEYS[1], ARGV[5]) == 1 then
    return 1
end
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('hset', KEYS[1], ARGV[5], 1)
redis.call('pexpire', KEYS[1], ARGV[4])
return 1
