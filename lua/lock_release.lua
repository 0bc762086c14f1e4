-- Reentrant lock release (Redisson RLock unlock with unlock latch, §2.4 and §1.6), with an
-- optional local hand-off (a latchkey addition that writes only Redisson's layout).
-- KEYS[1] lock hash, KEYS[2] lock channel, KEYS[3] the owner's unlock latch key;
-- ARGV[1] unlock message (0), ARGV[2] lease ms a partial release keeps at least,
-- ARGV[3] owner id, ARGV[4] publish command, ARGV[5] latch PX ms,
-- ARGV[6] the holds the owner knows it has (this release drops one),
-- ARGV[7] this release's request number (rising per owner);
-- ARGV[8], ARGV[9], optional: an owner to hand the lock to when this release frees it, and
-- that owner's lease ms.
-- Reply: nil when the owner does not hold the lock; 0 when still held; 1 when freed (and the
-- message published); 2 when handed to ARGV[8], which then holds it once with its own lease
-- (nothing is published: the lock was never free).
--
-- Safe to repeat. The latch is one key per owner, a high-water mark of its request numbers,
-- written and read in one SET ... GET (Redis 6.2+): n when request n acted, -n when it found
-- the lock not held. A run that finds its own number there is a repeat and replies what the
-- first run did, which follows from the request itself; a run that finds a higher number is
-- a stale duplicate, puts the mark back and changes nothing.
--
-- The count left is one below what the owner knows, whatever Redis counted, and a partial
-- release keeps the larger of the TTL left and the lease: a lease only grows.
local holds = tonumber(ARGV[6])
local req = tonumber(ARGV[7])
local last = tonumber(redis.call('set', KEYS[3], req, 'px', ARGV[5], 'get'))
if last and math.abs(last) >= req then
    if last ~= req then
        redis.call('set', KEYS[3], last, 'px', ARGV[5])
        return nil
    end
    if holds > 1 then
        return 0
    elseif ARGV[8] then
        return 2
    end
    return 1
end
if holds > 1 then
    if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
        redis.call('set', KEYS[3], -req, 'px', ARGV[5])
        return nil
    end
    redis.call('hset', KEYS[1], ARGV[3], holds - 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('pexpire', KEYS[1], ARGV[2])
    end
    return 0
end
-- The last hold. The owner's field is the hash's only one (an exclusive lock), so deleting
-- it deletes the key, as Redisson's DEL does, and tells in the same call whether the owner
-- held the lock at all.
if redis.call('hdel', KEYS[1], ARGV[3]) == 0 then
    redis.call('set', KEYS[3], -req, 'px', ARGV[5])
    return nil
end
if ARGV[8] then
    redis.call('hset', KEYS[1], ARGV[8], 1)
    redis.call('pexpire', KEYS[1], ARGV[9])
    return 2
end
redis.call(ARGV[4], KEYS[2], ARGV[1])
return 1
