-- Re-entry with an explicit lease (Redisson RLock re-entry, REDISSON-LAYOUT §2.2), numbered
-- on the owner's unlock latch like its unlocks (a latchkey addition; it writes only
-- Redisson's layout and the latch).
-- KEYS[1] lock hash, KEYS[2] the owner's unlock latch;
-- ARGV[1] lease ms, ARGV[2] owner id, ARGV[3] the holds the owner knows it has, ARGV[4] latch
-- PX ms, ARGV[5] this request's number.
-- Reply: as lock_acquire.lua — nil when acquired (the count one above what the owner knows,
-- the TTL set to the lease), otherwise the holder's PTTL — or -3 for a run that found its
-- number passed on the latch, which changes nothing.
--
-- A re-entry sets the TTL to its lease, which may be shorter than what the hold has. If its
-- reply is lost, the run may still reach Redis late — after the undo that follows, after a
-- renewal — and cut the TTL of a hold the owner keeps. Numbered on the latch, such a run
-- finds the mark of a later request (the undo, or any request since) and changes nothing; the
-- same mark raises the fences of earlier requests of unknown outcome, which are all numbered
-- below this one.
local r = tonumber(ARGV[5])
local last = tonumber(redis.call('set', KEYS[2], r, 'px', ARGV[4], 'get'))
if last and math.abs(last) >= r then
    if last ~= r then
        redis.call('set', KEYS[2], last, 'px', ARGV[4])
    end
    return -3
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hset', KEYS[1], ARGV[2], tonumber(ARGV[3]) + 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
