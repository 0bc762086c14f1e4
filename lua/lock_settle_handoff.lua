-- Settle a hand-off whose outcome stayed unknown (a latchkey addition; it writes only
-- Redisson's layout). The heir was told it holds the lock when the release was sent, so the
-- settlement completes the hand-off: if the release ran, it handed the lock over (or found it
-- gone); if it never ran, the releaser still holds the lock, and its hold goes to the heir as
-- the release would have passed it; if the releaser does not hold it either, it was lost
-- before the release, and nothing changes.
-- The settlement is a request of the releaser's like its unlocks, numbered right after the
-- release, and fenced by the same latch (see lock_release.lua): the latch tells what the
-- release did, if it ran — its mark is the release's number when it acted (handed the lock
-- on: a release naming an heir does nothing else) and minus it when it found the lock not
-- held — and once the settlement has run, a late run of the release changes nothing; a run of
-- the settlement itself reaching Redis after the mark has passed it — after the releaser took
-- the lock again — changes nothing either.
-- KEYS[1] lock hash, KEYS[2] the releaser's unlock latch;
-- ARGV[1] releaser owner, ARGV[2] this settlement's request number, ARGV[3] latch PX ms,
-- ARGV[4] heir lease ms, ARGV[5] heir owner.
-- The caller holds the heir's handle, so the heir has made no request of its own meanwhile.
-- Reply: 1 when the lock was handed to the heir (by the release or by this settlement; the
-- heir may have lost it since, which its lease tells), 0 when it was not. The settlement's
-- own mark is its number when it replied 1 and minus it when 0, so a repeat replies the same.
local n = tonumber(ARGV[2])
local last = tonumber(redis.call('set', KEYS[2], n, 'px', ARGV[3], 'get'))
if last and math.abs(last) >= n then
    if last ~= n then -- a repeat of a settlement that replied 0 (-n), or a stale run
        redis.call('set', KEYS[2], last, 'px', ARGV[3])
        return 0
    end
    return 1 -- a repeat of a settlement that replied 1
end
if last == n - 1 then -- the release ran and handed the lock over
    return 1
end
if last == 1 - n or redis.call('hdel', KEYS[1], ARGV[1]) == 0 then
    -- the release found the lock gone, or never ran and the releaser does not hold it
    redis.call('set', KEYS[2], -n, 'px', ARGV[3])
    return 0
end
redis.call('hset', KEYS[1], ARGV[5], 1)
redis.call('pexpire', KEYS[1], ARGV[4])
return 1
