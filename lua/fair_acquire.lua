-- Fair lock acquire (Redisson RFairLock, REDISSON-LAYOUT §3.2–3.4), safe to repeat.
-- KEYS[1] lock hash, KEYS[2] queue (list of waiting owners), KEYS[3] their deadlines (zset);
-- ARGV[1] lease ms, ARGV[2] owner id, ARGV[3] the holds the owner knows it has,
-- ARGV[4] wait ms (Redisson's threadWaitTime), ARGV[5] now (epoch ms),
-- ARGV[6] 1 to take a place in the queue when the lock cannot be taken (the waiting form),
-- 0 not to (TryLock without waiting).
-- Reply: nil when acquired or re-entered; -3 when the owner knows it holds the lock but its
-- field is gone (nothing changes); otherwise, for a waiter, the ms until the lock may come to
-- it with no message: the holder's PTTL at the head, the head's deadline behind it (-1:
-- unknown); for the non-waiting form the holder's PTTL.
--
-- A waiter's deadline is at least its latest attempt plus its position (1 at the head) times
-- wait, and every grant or departure ahead of it lowers the deadlines behind by one wait, as
-- Redisson's scripts do. So a live waiter, which attempts at least every wait/3, is never
-- found stale at the head, and a dead one's place lapses at the head one wait after its last
-- attempt, plus one for every dead waiter dropped ahead of it (dropping a stale head moves no
-- deadline: Java waiters' deadlines are only good for the position they were set for).
local now, wait = tonumber(ARGV[5]), tonumber(ARGV[4])
drop_stale(KEYS[2], KEYS[3], now)
local r = reenter(KEYS[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[1]))
if r then
    return r == -3 and -3 or nil
end
local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (not head or head == ARGV[2]) then
    if head then
        redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], ARGV[2])
    for _, w in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -wait, w)
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
local pttl = redis.call('pttl', KEYS[1])
if ARGV[6] ~= '1' then
    return pttl
end
local pos = redis.call('lpos', KEYS[2], ARGV[2])
if not pos then
    pos = redis.call('rpush', KEYS[2], ARGV[2]) - 1
end
local deadline = now + (pos + 1) * wait
local score = tonumber(redis.call('zscore', KEYS[3], ARGV[2]))
if not score or score < deadline then
    redis.call('zadd', KEYS[3], deadline, ARGV[2])
end
if pos == 0 then
    return pttl
end
local ahead = tonumber(redis.call('zscore', KEYS[3], redis.call('lindex', KEYS[2], 0)))
if not ahead then
    return -1
end
return math.max(ahead - now, 0)
