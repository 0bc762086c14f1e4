-- Undo an acquire whose reply was lost (a latchkey addition; it writes only Redisson's layout).
-- KEYS[1] lock hash, KEYS[2] lock channel, KEYS[3] the owner's unlock latch.
-- ARGV[1] owner id, ARGV[2] hold count the owner had before the lost attempt,
-- ARGV[3] lease ms kept when still held, ARGV[4] publish command, ARGV[5] unlock message (0),
-- ARGV[6] this undo's request number on the owner's latch, ARGV[7] the latch PX ms.
-- The undo is a request of the owner's, fenced by its latch like an unlock (see
-- lock_release.lua): a repeat of it, or a run reaching Redis after the mark has passed it —
-- after the owner took a hold since — changes nothing.
-- The lost attempt can only have added one hold, so one hold is taken back exactly when the
-- count is one above what the owner knew. Reply: 1 when a hold was taken back, 2 when the
-- attempt never ran and the owner holds what it knew (its TTL set again), 0 otherwise. The
-- mark is n when the undo set the owner's TTL and -n when it did nothing, so a repeat
-- replies 1 or 0 alike.
local n = tonumber(ARGV[6])
local last = tonumber(redis.call('set', KEYS[3], ARGV[6], 'px', ARGV[7], 'get'))
if last and math.abs(last) >= n then
    if last ~= n then -- a repeat of an undo that did nothing (-n), or a stale run
        redis.call('set', KEYS[3], last, 'px', ARGV[7])
        return 0
    end
    return 1 -- a repeat of an undo that set the owner's TTL (it replied 1 or 2)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
local known = tonumber(ARGV[2])
if count ~= known + 1 then
    if count > 0 and count == known then
        -- The attempt never ran: the owner's holds are as it knows them. Their TTL is set
        -- again, as an undo sets it, so that the owner can time its lease from this request.
        redis.call('pexpire', KEYS[1], ARGV[3])
        return 2
    end
    redis.call('set', KEYS[3], -n, 'px', ARGV[7])
    return 0
end
if count > 1 then
    redis.call('hincrby', KEYS[1], ARGV[1], -1)
    redis.call('pexpire', KEYS[1], ARGV[3])
    return 1
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[5])
return 1
