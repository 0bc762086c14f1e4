-- Settle a hand-off whose outcome stayed unknown (a latchkey addition; it writes only
-- Redisson's layout). The releaser meant the release as its last and has given its hold up;
-- the heir was told it got nothing. So whichever of the two holds the lock because of that
-- release — the releaser if it never ran, the heir if it did — no longer should: the hold is
-- deleted and waiters are told.
-- The settlement is a request of the releaser's like its unlocks, numbered after the
-- release, and fenced by the same latch (see lock_release.lua): a repeat of it, or a run
-- reaching Redis after the mark has passed it, changes nothing; and once it has run, so does
-- any late run of the release.
-- KEYS[1] lock hash, KEYS[2] lock channel, KEYS[3] the releaser's unlock latch;
-- ARGV[1] releaser owner, ARGV[2] this settlement's request number, ARGV[3] latch PX ms,
-- ARGV[4] heir owner, ARGV[5] publish command, ARGV[6] unlock message (0).
-- The caller keeps the heir reserved, so the heir has made no attempt of its own meanwhile.
-- Reply: 1 when a hold was deleted, 0 when neither held the lock or this was a repeat.
local n = tonumber(ARGV[2])
local last = tonumber(redis.call('set', KEYS[3], ARGV[2], 'px', ARGV[3], 'get'))
if last and math.abs(last) >= n then
    if last ~= n then
        redis.call('set', KEYS[3], last, 'px', ARGV[3])
    end
    return 0
end
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 and redis.call('hdel', KEYS[1], ARGV[4]) == 0 then
    return 0
end
redis.call(ARGV[5], KEYS[2], ARGV[6])
return 1
