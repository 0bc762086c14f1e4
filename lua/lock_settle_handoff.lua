-- Settle a hand-off whose outcome stayed unknown (a latchkey addition; it writes only
-- Redisson's layout). The releaser meant the release as its last and has given its hold up;
-- the heir was told it got nothing. So whichever of the two holds the lock because of that
-- release — the releaser if it never ran, the heir if it did — no longer should: the hold is
-- deleted and waiters are told. First the releaser's latch mark is raised to the release's
-- number, so that a run of it reaching Redis later changes nothing (see lock_release.lua).
-- KEYS[1] lock hash, KEYS[2] lock channel, KEYS[3] the releaser's unlock latch;
-- ARGV[1] releaser owner, ARGV[2] the release's request number, ARGV[3] latch PX ms,
-- ARGV[4] heir owner, ARGV[5] publish command, ARGV[6] unlock message (0).
-- The caller keeps the heir reserved, so the heir has made no attempt of its own meanwhile.
-- Reply: 1 when a hold was deleted, 0 when neither held the lock.
local last = tonumber(redis.call('get', KEYS[3]))
if not last or math.abs(last) < tonumber(ARGV[2]) then
    redis.call('set', KEYS[3], ARGV[2], 'px', ARGV[3])
end
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 and redis.call('hdel', KEYS[1], ARGV[4]) == 0 then
    return 0
end
redis.call(ARGV[5], KEYS[2], ARGV[6])
return 1
